//! A level split over several client agents (`load.clients = K`): the load one host cannot
//! drive, from K hosts that start together.
//!
//! For each level: the trial's own host warms the target up in a call of its own (a warm-up
//! has no planned length, so nothing could be started after it together); the controller then
//! measures each client's clock against its own (the `GetClock` exchange with the smallest
//! round trip: offset known to within half of it), picks a start a moment ahead, and sends every
//! client its share (concurrency, rate and request count divided, a seed and a run id of its
//! own so that no two clients send the same prompt) with that start on its own clock. Each
//! returns its histograms; [`merge`] makes the one level that is stored, with each client's
//! share, its clock offset and how far apart the clients began.

mod merge;

use fleetbench_proto::agentpb::{self, RunBenchmarkRequest, run_benchmark_request::Bound};
use futures::future::join_all;

use super::*;
use merge::{Clock, Share};

/// A host that drives part of each level besides the attempt's own, under its own lease.
pub(crate) struct ClientHost {
    pub host: String,
    pub client: AgentClient,
    pub lease: AgentLease,
}

/// How long after the requests leave the clients begin: room for the slowest to arrive.
const START_MARGIN_MS: f64 = 1_500.0;
/// `GetClock` exchanges per client per level; the one with the smallest round trip counts.
const CLOCK_SAMPLES: usize = 4;

/// A client to send to: the attempt's own host or one of its client hosts.
struct Part<'a> {
    host: &'a str,
    client: &'a AgentClient,
    epoch: u64,
}

/// `total` split into `k` shares as equal as whole numbers allow (the first ones larger).
pub(crate) fn split(total: u32, k: u32) -> Vec<u32> {
    (0..k)
        .map(|i| total / k + u32::from(i < total % k))
        .collect()
}

/// `base` running level `index` alone (every other level skipped).
fn only(base: &RunBenchmarkRequest, index: u32) -> RunBenchmarkRequest {
    let mut req = base.clone();
    req.skip_levels = (0..base.levels.len() as u32)
        .filter(|&i| i != index)
        .collect();
    req
}

/// The controller's clock, ms, with sub-millisecond resolution.
fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// A client's clock against ours: the exchange with the smallest round trip.
async fn clock(client: &AgentClient) -> Result<Clock, tonic::Status> {
    let mut best: Option<(f64, f64)> = None;
    for _ in 0..CLOCK_SAMPLES {
        let mut c = client.clone();
        let t0 = now_ms();
        let reading = c.get_clock(agentpb::GetClockRequest {}).await?.into_inner();
        let t1 = now_ms();
        let (rtt, offset) = (t1 - t0, reading.unix_ms - (t0 + t1) / 2.0);
        if best.is_none_or(|(r, _)| rtt < r) {
            best = Some((rtt, offset));
        }
    }
    let (rtt, offset_ms) = best.unwrap_or_default();
    Ok(Clock {
        offset_ms,
        uncertainty_ms: rtt / 2.0,
    })
}

/// Takes every client host's agent lease; none is kept when one cannot be had (the trial
/// runs again: a host that cannot be reached is marked so, one leased by another holder is
/// waited for by the next attempt).
pub(super) async fn lease_clients(
    ctx: &Ctx,
    trial: &TrialRow,
    extra: &[Lease],
) -> Result<Vec<ClientHost>, TrialOutcome> {
    let mut out: Vec<ClientHost> = Vec::with_capacity(extra.len());
    for l in extra {
        match AgentLease::acquire(&l.client, &trial.job_id, &trial.id, ctx.lease_ttl).await {
            Ok(lease) => out.push(ClientHost {
                host: l.host.clone(),
                client: l.client.clone(),
                lease,
            }),
            Err(e) => {
                for c in out {
                    c.lease.release().await;
                }
                let text = match e {
                    AcquireError::Busy(t) | AcquireError::Refused(t) => t,
                    AcquireError::Unreachable(t) => {
                        ctx.inventory.mark_unreachable(&l.host, &t);
                        t
                    }
                };
                return Err(TrialOutcome::Interrupted(format!(
                    "client host {}: {text}",
                    l.host
                )));
            }
        }
    }
    Ok(out)
}

impl Attempt<'_> {
    /// Every level not in `skip`, each split over the attempt's host and its client hosts.
    pub(super) async fn bench_split(&mut self, skip: Vec<u32>) -> Result<(), Stop> {
        let base = {
            let mut req = self
                .spec
                .benchmark_request(self.trial.workload_index as usize);
            let c = &self.spec.configs[self.trial.config_index as usize];
            req.target = c.target.as_ref().map(|t| t.to_pb(c.kind));
            if let Some(t) = &mut req.target {
                // No one client's reading spans the level (see merge::merge).
                t.metrics_urls.clear();
            }
            req
        };
        let clients = self.clients;
        for index in 0..base.levels.len() as u32 {
            if skip.contains(&index) {
                continue;
            }
            let span = self.level_span(index);
            // Any client host's lease ending stops the level (the attempt's own is watched by
            // the attempt).
            let ended =
                futures::future::select_all(clients.iter().map(|c| Box::pin(c.lease.ended())));
            let result = tokio::select! {
                r = self.split_level(&base, index) => r?,
                (end, i, _) = ended => {
                    let c = &clients[i];
                    return Err(Stop::Outside(format!(
                        "client host {}: {}",
                        c.host,
                        match end {
                            LeaseEnd::Fenced(m) | LeaseEnd::Lost(m) => m,
                        }
                    )));
                }
                _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
            };
            fleetbench_proto::spans::record_level(&span, &result);
            self.store_level(result).instrument(span).await?;
        }
        Ok(())
    }

    fn parts(&self) -> Vec<Part<'_>> {
        std::iter::once(Part {
            host: &self.host,
            client: &self.client,
            epoch: self.lease.epoch,
        })
        .chain(self.clients.iter().map(|c| Part {
            host: &c.host,
            client: &c.client,
            epoch: c.lease.epoch,
        }))
        .collect()
    }

    /// One level: warm-up, clocks, every client's share from one start, merged.
    async fn split_level(
        &self,
        base: &RunBenchmarkRequest,
        index: u32,
    ) -> Result<LevelResult, Stop> {
        let parts = self.parts();
        if base.warmup_requests > 0 {
            self.warm_up(&parts[0], base, index).await?;
        }
        let mut clocks = Vec::with_capacity(parts.len());
        for p in &parts {
            clocks.push(
                clock(p.client)
                    .await
                    .map_err(|s| self.client_stop(p, "GetClock", s))?,
            );
        }
        let start = now_ms() + START_MARGIN_MS;
        let (reqs, levels) = self.share_requests(base, index, &parts, &clocks, start);
        let results = join_all(parts.iter().zip(reqs).map(|(p, req)| self.share(p, req))).await;
        let mut shares = Vec::with_capacity(parts.len());
        for (((p, clock), share), r) in parts.iter().zip(clocks).zip(levels).zip(results) {
            let result = r?.ok_or_else(|| {
                Stop::Lost(format!(
                    "client {}: RunBenchmark ended without the level",
                    p.host
                ))
            })?;
            shares.push(Share {
                host: p.host.to_string(),
                clock,
                level: share,
                result,
            });
        }
        let level = base.levels[index as usize];
        merge::merge(index, &level, &shares).map_err(|e| Stop::Rejected(e.to_string()))
    }

    /// The warm-up of level `index`, on the attempt's own host alone, in a call of its own (a
    /// warm-up has no length anyone could plan a common start after); its level is not kept.
    async fn warm_up(
        &self,
        own: &Part<'_>,
        base: &RunBenchmarkRequest,
        index: u32,
    ) -> Result<(), Stop> {
        let mut req = only(base, index);
        let slots = base.levels[index as usize]
            .concurrency
            .unwrap_or(16)
            .min(base.warmup_requests)
            .max(1);
        req.levels[index as usize] = agentpb::LoadLevel {
            concurrency: Some(slots),
            ..agentpb::LoadLevel::default()
        };
        req.bound = Some(Bound::NumRequests(base.warmup_requests));
        req.warmup_requests = 0;
        req.run_id = format!("{}-w{index}", self.run.run_id);
        req.lease_epoch = self.lease.epoch;
        self.share(own, req).await.map(|_| ())
    }

    /// Each client's request for level `index`: its share of the concurrency, rate and request
    /// count, the common `start` (controller's clock, ms) on its own clock, histograms asked
    /// for, a run id and a seed of its own (the same seed would send the same lengths and
    /// sessions); with the share each runs.
    fn share_requests(
        &self,
        base: &RunBenchmarkRequest,
        index: u32,
        parts: &[Part<'_>],
        clocks: &[Clock],
        start: f64,
    ) -> (Vec<RunBenchmarkRequest>, Vec<agentpb::LoadLevel>) {
        let k = parts.len() as u32;
        let level = base.levels[index as usize];
        let concurrency = level.concurrency.map(|c| split(c, k));
        let requests = match base.bound {
            Some(Bound::NumRequests(n)) => Some(split(n, k)),
            _ => None,
        };
        parts
            .iter()
            .zip(clocks)
            .enumerate()
            .map(|(i, (p, clock))| {
                let mut req = only(base, index);
                let share = agentpb::LoadLevel {
                    concurrency: concurrency.as_ref().map(|c| c[i]),
                    request_rate: level.request_rate.map(|r| r / f64::from(k)),
                    burstiness: level.burstiness,
                };
                req.levels[index as usize] = share;
                if let Some(n) = &requests {
                    req.bound = Some(Bound::NumRequests(n[i]));
                }
                req.warmup_requests = 0;
                req.start_at_unix_ms = (start + clock.offset_ms).round() as i64;
                req.histograms = true;
                req.run_id = format!("{}-c{i}", self.run.run_id);
                req.lease_epoch = p.epoch;
                if let Some(w) = &mut req.workload {
                    w.seed = w.seed.wrapping_add(u64::from(i as u32));
                }
                (req, share)
            })
            .unzip()
    }

    /// Runs `req` on one client: its level, its progress relayed as that host's.
    async fn share(
        &self,
        p: &Part<'_>,
        req: RunBenchmarkRequest,
    ) -> Result<Option<LevelResult>, Stop> {
        let mut client = p.client.clone();
        let mut stream = client
            .run_benchmark(req)
            .await
            .map_err(|s| self.client_stop(p, "RunBenchmark", s))?
            .into_inner();
        let mut level = None;
        while let Some(ev) = stream
            .message()
            .await
            .map_err(|s| self.client_stop(p, "RunBenchmark stream", s))?
        {
            match ev.event {
                Some(benchmark_event::Event::Progress(pr)) => {
                    let ev = LevelProgress {
                        host: p.host.to_string(),
                        run_id: self.run.run_id.clone(),
                        config_name: self.trial.config_name.clone(),
                        level_count: self.trial.level_count,
                        progress: Some(pr),
                    };
                    self.ctx
                        .hub
                        .emit(&self.trial.job_id, job_event::Event::Progress(ev))
                        .await?;
                }
                Some(benchmark_event::Event::Level(r)) => level = Some(r),
                None => {}
            }
        }
        Ok(level)
    }

    /// A client's failure: the attempt's own host as any trial's; another host's loss is that
    /// host's (marked unreachable), and the trial runs again.
    fn client_stop(&self, p: &Part<'_>, what: &str, status: tonic::Status) -> Stop {
        let stop = classify(&format!("client {}: {what}", p.host), status);
        if p.host == self.host {
            return stop;
        }
        match stop {
            Stop::Lost(text) => {
                self.ctx.inventory.mark_unreachable(p.host, &text);
                Stop::Outside(text)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        for (total, k) in [(8, 4), (9, 4), (4, 4), (1_000_001, 7), (5, 1)] {
            let s = super::split(total, k);
            assert_eq!(s.len(), k as usize);
            assert_eq!(s.iter().sum::<u32>(), total);
            assert!(
                s.iter().max().unwrap() - s.iter().min().unwrap() <= 1,
                "{s:?}"
            );
        }
    }
}
