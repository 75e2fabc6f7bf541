//! Turns recorded link facts and measurements into the report's pair matrix with its diagnosis.

use super::diagnose::{asymmetry, diagnose, expected_link};
use super::report::{PairLink, PairMeasurement, PairResult};

/// Joins each link with its measurement (a pair without one was not measured) and diagnoses
/// it; the order of `links` is kept.
pub fn assemble(links: &[PairLink], measured: &[(u32, u32, PairMeasurement)]) -> Vec<PairResult> {
    let find = |s: u32, d: u32| {
        measured
            .iter()
            .find(|(ms, md, _)| *ms == s && *md == d)
            .map(|(_, _, m)| m)
    };
    links
        .iter()
        .map(|link| {
            let m = find(link.src, link.dst).cloned().unwrap_or_default();
            let (expected_gbps, expected_words) = expected_link(link);
            let mut findings = if find(link.src, link.dst).is_some() {
                diagnose(link, &m, expected_gbps)
            } else {
                Vec::new()
            };
            if let (Some(a), Some(b)) = (
                m.uni_enabled_gbps.filter(|_| m.cuda_can_access_peer),
                find(link.dst, link.src)
                    .filter(|r| r.cuda_can_access_peer)
                    .and_then(|r| r.uni_enabled_gbps),
            ) && let Some(f) = asymmetry(a, b)
            {
                findings.push(f);
            }
            PairResult {
                link: link.clone(),
                measured: m,
                expected_gbps,
                expected_link: expected_words,
                findings,
            }
        })
        .collect()
}
