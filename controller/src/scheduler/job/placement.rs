//! Where a job's next trial goes: the first waiting trial that free hosts can take, with those
//! hosts held all or none (its own, a gang's ranks, a split level's client hosts), and what the
//! job says when none ever can.

use super::*;

pub(super) fn block(t: &TrialRow) -> (u32, u32) {
    (t.workload_index, t.repeat)
}

/// The first waiting trial (in order) that free hosts can take, with those hosts held: its own
/// first, then the client hosts of a level split over several (`load.clients`), all or none.
/// A trial goes to a host it was lost on only when no other host could ever take it.
pub(super) fn placeable(
    ctx: &Ctx,
    spec: &spec::JobSpec,
    job_id: &str,
    queue: &Queue,
) -> Option<(usize, Vec<crate::agents::Lease>)> {
    let matches = |h: &HostSnapshot| spec.hosts.matches(&h.name, &h.labels, Some(&h.facts));
    // Every host's facts, taken only for a trial that lost a host: a copy of the whole fleet per
    // placement made placing 1,000 trials on 1,000 hosts quadratic.
    let mut snapshots: Option<Vec<HostSnapshot>> = None;
    for (i, t) in queue.trials.iter().enumerate() {
        // A host this trial was lost on takes it again only when no other host could ever
        // take it (a host that refuses leases as a host fault still answers heartbeats).
        // A gang needs `nodes` hosts: it goes back to hosts it was lost on when the others
        // are too few.
        let nodes = trial::engine_hosts(spec, t);
        // Hosts the trial holds at once: a gang's ranks, a deployment's router and replicas,
        // or a split level's client hosts.
        let n = if nodes > 1 {
            nodes
        } else {
            spec.load.clients.max(1) as usize
        };
        let lost = queue.lost.get(&t.id);
        let only_lost_hosts_match = lost.is_some_and(|lost| {
            snapshots
                .get_or_insert_with(|| ctx.inventory.snapshots())
                .iter()
                .filter(|h| matches(h) && !lost.contains(&h.name))
                .count()
                < n
        });
        let not_lost =
            |h: &HostSnapshot| only_lost_hosts_match || lost.is_none_or(|l| !l.contains(&h.name));
        if queue.blocked {
            // A block runs in its recorded order, one trial after another, on its host; a new
            // block starts only on a host that no unfinished block holds.
            let b = block(t);
            if queue.trials.iter().take(i).any(|u| block(u) == b) {
                continue;
            }
            let pinned = queue.pins.get(&b);
            let held: BTreeSet<&String> = queue
                .pins
                .iter()
                .filter(|(k, _)| **k != b && queue.trials.iter().any(|u| block(u) == **k))
                .map(|(_, h)| h)
                .collect();
            // The block's host is the trial's own (a gang's rank 0); its other hosts (ranks,
            // client hosts) are any free ones that no other block holds.
            let first = |h: &HostSnapshot| {
                matches(h)
                    && match pinned {
                        Some(p) => &h.name == p,
                        None => !held.contains(&h.name) && not_lost(h),
                    }
            };
            let fits = |h: &HostSnapshot, taken: &[HostSnapshot]| {
                let ok = if taken.is_empty() {
                    first(h)
                } else {
                    matches(h) && !held.contains(&h.name) && not_lost(h)
                };
                ok && trial::group_fits(spec, t, h, taken)
            };
            if let Some(leases) = ctx.inventory.acquire_all(job_id, n, fits) {
                return Some((i, leases));
            }
            continue;
        }
        // An engine spanning hosts takes all its hosts at once (`trial::gang`), as a split
        // level takes its client hosts.
        let fits = |h: &HostSnapshot, taken: &[HostSnapshot]| {
            matches(h) && not_lost(h) && trial::group_fits(spec, t, h, taken)
        };
        if let Some(leases) = ctx.inventory.acquire_all(job_id, n, fits) {
            return Some((i, leases));
        }
    }
    None
}

pub(super) fn no_host_message(ctx: &Ctx, spec: &spec::JobSpec, waited: Duration) -> String {
    let hosts: Vec<String> = ctx
        .inventory
        .snapshots()
        .iter()
        .map(|h| {
            let fits = spec.hosts.matches(&h.name, &h.labels, Some(&h.facts));
            format!(
                "{} ({}, {})",
                h.name,
                h.health.word(),
                if fits { "matches" } else { "does not match" }
            )
        })
        .collect();
    let mut text = format!(
        "no ready host matched the job's [hosts] for {}; hosts: {}",
        humantime::format_duration(waited),
        if hosts.is_empty() {
            "none known".to_string()
        } else {
            hosts.join(", ")
        }
    );
    if let Some((c, d)) = spec
        .configs
        .iter()
        .find_map(|c| Some((c, c.deployment.as_ref()?)))
    {
        text.push_str(&format!(
            " (config {:?} is {} replicas behind a router: it needs {} hosts ready at once, the \
             first with profile {:?} for the router, the others with profile {:?})",
            c.name,
            d.replicas,
            d.replicas + 1,
            d.router.profile,
            c.profile
        ));
    } else if let Some(c) = spec.configs.iter().find(|c| c.nodes > 1) {
        text.push_str(&format!(
            " (config {:?} spans {} hosts: it needs that many ready at once, the first with a \
             rendezvous_port in profile {:?})",
            c.name, c.nodes, c.profile
        ));
    }
    text
}
