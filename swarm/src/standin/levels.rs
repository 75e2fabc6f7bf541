//! A stand-in's benchmark: each level lasts and reports what the sim's model predicts for the
//! engine's flags, with progress every second, under the caller's lease epoch.

use std::time::Duration;

use fleetbench_proto::agentpb;
use fleetbench_proto::now_unix_ms;
use fleetbench_sim::ModelParams;
use tokio::sync::mpsc;
use tonic::Status;

use super::StandIn;
use crate::model;

type BenchTx = mpsc::Sender<Result<agentpb::BenchmarkEvent, Status>>;

impl StandIn {
    /// Whether the engine a benchmark started on still runs; sets the running level's load.
    pub(super) fn still(&self, generation: u64, running: u32) -> bool {
        let mut e = self.lock();
        if e.generation != generation || e.state != agentpb::EngineState::Ready {
            return false;
        }
        e.running = running;
        true
    }

    pub(super) async fn bench(
        &self,
        req: agentpb::RunBenchmarkRequest,
        params: ModelParams,
        generation: u64,
        tx: BenchTx,
    ) {
        let send = |e: agentpb::benchmark_event::Event| agentpb::BenchmarkEvent {
            unix_ms: now_unix_ms(),
            event: Some(e),
        };
        for (i, load) in req.levels.iter().enumerate() {
            let index = i as u32;
            if req.skip_levels.contains(&index) {
                continue;
            }
            let level = model::level(&params, &req, index, load, self.jitter);
            let concurrency = load.concurrency.unwrap_or(1);
            if !self.still(generation, concurrency) {
                return;
            }
            let started_unix_ms = now_unix_ms();
            let started = tokio::time::Instant::now();
            let end = started + Duration::from_secs_f64(level.wall_s);
            let mut tick =
                tokio::time::interval_at(started + Duration::from_secs(1), Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(end) => break,
                    _ = tick.tick() => {
                        let frac = started.elapsed().as_secs_f64() / level.wall_s;
                        let p = agentpb::BenchmarkProgress {
                            level_index: index,
                            completed: (level.result.completed as f64 * frac.min(1.0)) as u64,
                            failed: 0,
                            total: level.result.completed,
                            elapsed_s: started.elapsed().as_secs_f64(),
                        };
                        if tx.send(Ok(send(agentpb::benchmark_event::Event::Progress(p)))).await.is_err() {
                            return;
                        }
                    }
                    _ = tx.closed() => return,
                }
            }
            if !self.still(generation, 0) {
                return;
            }
            let mut result = level.result;
            result.started_unix_ms = started_unix_ms;
            result.finished_unix_ms = now_unix_ms();
            // Measured under the caller's lease, as a real agent reports it.
            result.lease_epoch = req.lease_epoch;
            if level.crashed {
                let mut e = self.lock();
                e.state = agentpb::EngineState::Failed;
                e.crash = result.crash.clone();
                e.generation += 1;
                drop(e);
                self.changed();
            }
            let crashed = level.crashed;
            if tx
                .send(Ok(send(agentpb::benchmark_event::Event::Level(result))))
                .await
                .is_err()
            {
                return;
            }
            if crashed {
                // The engine is gone: the caller applies it again for the levels left.
                return;
            }
        }
    }
}
