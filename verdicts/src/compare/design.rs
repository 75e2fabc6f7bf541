//! How a level's winner and runner-up are compared: the design their jobs allow.
//!
//! - Same job, blocked order, every repeat of both configs on the same host: paired by repeat
//!   block (the block's host, model load and hour cancel).
//! - Same job otherwise (interleaved or sequential order, a block split over hosts by a retry):
//!   two samples; the response notes what that leaves in the noise.
//! - Different jobs: through a config both jobs ran at this level (each job's ratio to it, so
//!   a job effect cancels); without one the level is not tested, and the verdict says why.

use std::collections::BTreeMap;

use fleetbench_stats::contrast::Design;

use fleetbench_spec::Order;

/// One repeat's value of a config at a level.
#[derive(Debug, Clone)]
pub(super) struct Point {
    pub repeat: u32,
    pub host: String,
    pub value: f64,
}

/// A config's identity and points at a level, as the design needs them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Side<'a> {
    pub job_id: &'a str,
    pub config_id: &'a str,
    pub points: &'a [Point],
}

/// The comparison of a level, owning its values.
#[derive(Debug, Clone)]
pub(super) enum Plan {
    Paired(Vec<(f64, f64)>),
    Unpaired(Vec<f64>, Vec<f64>),
    /// Through `reference` (a config name): (config, reference) per block of each job.
    Referenced {
        a: Vec<(f64, f64)>,
        b: Vec<(f64, f64)>,
        reference: String,
    },
    /// Not testable, and why.
    Refused(String),
}

impl Plan {
    pub fn design(&self) -> Option<Design<'_>> {
        match self {
            Plan::Paired(p) => Some(Design::Paired(p)),
            Plan::Unpaired(a, b) => Some(Design::Unpaired { a, b }),
            Plan::Referenced { a, b, .. } => Some(Design::Referenced { a, b }),
            Plan::Refused(_) => None,
        }
    }
}

/// Values of two sides matched by repeat block on one host; None unless every value of both
/// sides has its partner.
fn blocks(a: &[Point], b: &[Point]) -> Option<Vec<(f64, f64)>> {
    let by_repeat: BTreeMap<u32, &Point> = b.iter().map(|p| (p.repeat, p)).collect();
    if a.len() != b.len() || by_repeat.len() != b.len() {
        return None;
    }
    a.iter()
        .map(|p| {
            let q = by_repeat.get(&p.repeat)?;
            (q.host == p.host).then_some((p.value, q.value))
        })
        .collect()
}

/// Blocks of `side` matched with the shared config's points in the same job.
fn against(side: &Side<'_>, reference: &Side<'_>) -> Option<Vec<(f64, f64)>> {
    blocks(side.points, reference.points).filter(|b| !b.is_empty())
}

/// The plan for winner `w` against runner-up `r`; `others` are every config of the level
/// (candidates for a shared reference), `order` the order of the winner's job, `name` a
/// config's display name.
pub(super) fn plan(
    w: &Side<'_>,
    r: &Side<'_>,
    others: &[(Side<'_>, String)],
    order: Option<Order>,
) -> Plan {
    let values = |s: &Side<'_>| s.points.iter().map(|p| p.value).collect::<Vec<f64>>();
    if w.job_id == r.job_id {
        if order.is_some_and(Order::is_blocked)
            && let Some(pairs) = blocks(w.points, r.points)
        {
            return Plan::Paired(pairs);
        }
        return Plan::Unpaired(values(w), values(r));
    }
    // Different jobs: a config both jobs ran at this level, other than the two compared.
    for (ref_w, name) in others.iter().filter(|(s, _)| s.job_id == w.job_id) {
        if ref_w.config_id == w.config_id {
            continue;
        }
        let Some((ref_r, _)) = others
            .iter()
            .find(|(s, _)| s.job_id == r.job_id && s.config_id == ref_w.config_id)
        else {
            continue;
        };
        if ref_r.config_id == r.config_id {
            continue;
        }
        if let (Some(a), Some(b)) = (against(w, ref_w), against(r, ref_r)) {
            return Plan::Referenced {
                a,
                b,
                reference: name.clone(),
            };
        }
    }
    Plan::Refused(
        "the two configs ran in different jobs and no other config ran in both at this level \
         (on the same hosts, repeat by repeat): a job effect (another day, driver or host \
         state) cannot be told from a config effect, so the level is not tested; run a \
         config both jobs share"
            .to_string(),
    )
}

/// What a job's order leaves uncorrected, for the response's notes; None for blocked.
pub(super) fn order_note(job_id: &str, order: Order) -> Option<String> {
    let job: String = job_id.chars().take(8).collect();
    match order {
        Order::Blocked { .. } => None,
        Order::Interleaved => Some(format!(
            "job {job} ran in interleaved order: a repeat's configs may have run on different \
             hosts or far apart in time, so host effects and drift stay in the noise (tested as \
             two samples, not paired)"
        )),
        Order::Sequential => Some(format!(
            "job {job} ran in sequential order: each config's repeats ran back to back, so a \
             drift over the job's time reads as a difference between configs and no test can \
             remove it; its verdicts hold only if nothing drifted (use order = \"blocked\")"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(values: &[(u32, &str, f64)]) -> Vec<Point> {
        values
            .iter()
            .map(|&(repeat, host, value)| Point {
                repeat,
                host: host.to_string(),
                value,
            })
            .collect()
    }

    fn side<'a>(job: &'a str, config: &'a str, points: &'a [Point]) -> Side<'a> {
        Side {
            job_id: job,
            config_id: config,
            points,
        }
    }

    #[test]
    fn a_blocked_job_pairs_by_repeat_on_one_host_and_falls_back_otherwise() {
        let blocked = Order::Blocked { seed: None };
        let a = pts(&[(0, "h1", 110.0), (1, "h2", 120.0)]);
        let b = pts(&[(1, "h2", 100.0), (0, "h1", 90.0)]);
        let p = plan(&side("j", "a", &a), &side("j", "b", &b), &[], Some(blocked));
        assert!(
            matches!(&p, Plan::Paired(v) if v == &[(110.0, 90.0), (120.0, 100.0)]),
            "{p:?}"
        );
        // A retry moved one block's config to another host: two samples.
        let moved = pts(&[(1, "h3", 100.0), (0, "h1", 90.0)]);
        let p = plan(
            &side("j", "a", &a),
            &side("j", "b", &moved),
            &[],
            Some(blocked),
        );
        assert!(matches!(p, Plan::Unpaired(..)), "{p:?}");
        let p = plan(
            &side("j", "a", &a),
            &side("j", "b", &b),
            &[],
            Some(Order::Sequential),
        );
        assert!(matches!(p, Plan::Unpaired(..)), "{p:?}");
        assert!(order_note("j", Order::Sequential).is_some_and(|n| n.contains("drift")));
        assert!(order_note("j", blocked).is_none());
    }

    #[test]
    fn two_jobs_compare_through_a_shared_config_or_not_at_all() {
        let x1 = pts(&[(0, "h1", 100.0), (1, "h1", 101.0)]);
        let r1 = pts(&[(0, "h1", 80.0), (1, "h1", 81.0)]);
        let x2 = pts(&[(0, "h2", 110.0), (1, "h2", 111.0)]);
        let r2 = pts(&[(0, "h2", 88.0), (1, "h2", 89.0)]);
        let others = [
            (side("j1", "x", &x1), "x".to_string()),
            (side("j1", "ref", &r1), "ref".to_string()),
            (side("j2", "x", &x2), "x".to_string()),
            (side("j2", "ref", &r2), "ref".to_string()),
        ];
        let blocked = Order::Blocked { seed: None };
        let p = plan(
            &side("j2", "x", &x2),
            &side("j1", "x", &x1),
            &others,
            Some(blocked),
        );
        assert!(
            matches!(&p, Plan::Referenced { reference, .. } if reference == "ref"),
            "{p:?}"
        );
        let p = plan(
            &side("j2", "x", &x2),
            &side("j1", "x", &x1),
            &others[..1],
            Some(blocked),
        );
        assert!(
            matches!(&p, Plan::Refused(why) if why.contains("job effect")),
            "{p:?}"
        );
    }
}
