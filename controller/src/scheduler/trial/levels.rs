//! A trial's benchmark: `RunBenchmark` streamed from the agent, each level stored the moment it
//! arrives (under the lease's epoch, once), its span and metrics recorded.

use super::*;

impl Attempt<'_> {
    pub(super) async fn bench(&mut self, skip: Vec<u32>) -> Result<(), Stop> {
        let mut req = self
            .spec
            .benchmark_request(self.trial.workload_index as usize);
        req.run_id = self.run.run_id.clone();
        req.skip_levels = skip;
        req.lease_epoch = self.lease.epoch;
        let c = &self.spec.configs[self.trial.config_index as usize];
        req.target = c.target.as_ref().map(|t| t.to_pb(c.kind));
        let mut client = self.client.clone();
        let cancel = self.cancel.clone();
        let mut stream = tokio::select! {
            r = client.run_benchmark(req) => r.map_err(|s| classify("RunBenchmark", s))?.into_inner(),
            _ = cancel.cancelled() => return Err(Stop::Cancelled),
        };
        let mut spans: HashMap<u32, tracing::Span> = HashMap::new();
        loop {
            let msg = tokio::select! {
                m = stream.message() => m.map_err(|s| classify("RunBenchmark stream", s))?,
                _ = cancel.cancelled() => return Err(Stop::Cancelled),
            };
            let Some(BenchmarkEvent { event, .. }) = msg else {
                return Ok(());
            };
            match event {
                Some(benchmark_event::Event::Progress(p)) => {
                    spans
                        .entry(p.level_index)
                        .or_insert_with(|| self.level_span(p.level_index));
                    let ev = LevelProgress {
                        host: self.host.clone(),
                        run_id: self.run.run_id.clone(),
                        config_name: self.trial.config_name.clone(),
                        level_count: self.trial.level_count,
                        progress: Some(p),
                    };
                    self.ctx
                        .hub
                        .emit(&self.trial.job_id, job_event::Event::Progress(ev))
                        .await?;
                }
                Some(benchmark_event::Event::Level(result)) => {
                    let span = spans
                        .remove(&result.level_index)
                        .unwrap_or_else(|| self.level_span(result.level_index));
                    fleetbench_proto::spans::record_level(&span, &result);
                    self.store_level(result).instrument(span).await?;
                }
                None => {}
            }
        }
    }

    pub(super) fn level_span(&self, index: u32) -> tracing::Span {
        let c = &self.spec.configs[self.trial.config_index as usize];
        let level = self
            .spec
            .benchmark_request(self.trial.workload_index as usize)
            .levels
            .get(index as usize)
            .cloned()
            .unwrap_or_default();
        fleetbench_proto::bench_level_span!(
            index,
            level,
            fleetbench.config.id = %c.config_id,
            fleetbench.config.name = %c.name,
            fleetbench.engine.kind = c.kind.as_str(),
            gen_ai.request.model = %c.model,
            fleetbench.host = %self.host,
            fleetbench.workload = %self.trial.workload,
        )
    }

    pub(super) async fn store_level(&mut self, mut result: LevelResult) -> Result<(), Stop> {
        if let Some(g) = self.gang {
            g.name_loss(&mut result).await;
        }
        if let Some(d) = self.deployment {
            d.name_loss(&mut result);
        }
        // Fencing on this side too: a level measured under another epoch, or arriving after
        // this attempt gave its lease up, is never stored.
        if result.lease_epoch != self.lease.epoch || !self.lease.held() {
            tracing::warn!(
                level = result.level_index,
                result_epoch = result.lease_epoch,
                lease_epoch = self.lease.epoch,
                held = self.lease.held(),
                "level reported outside the attempt's lease: not stored"
            );
            return Err(Stop::Fenced(format!(
                "level {} arrived under lease epoch {} while this attempt holds epoch {}{}",
                result.level_index,
                result.lease_epoch,
                self.lease.epoch,
                if self.lease.held() { "" } else { " (ended)" }
            )));
        }
        let crashed = result.outcome == LevelOutcome::Crashed as i32;
        let crash_class = result.crash.as_ref().map(|c| c.class());
        // An engine killed from outside mid-level measured nothing of the config: the level is
        // not stored (it would decide the verdict as the config's crash) and the trial runs
        // again, skipping the levels already stored, as after a fenced-off attempt.
        if let Some(crash) = result
            .crash
            .as_ref()
            .filter(|c| c.class().not_the_configs())
        {
            tracing::warn!(
                level = result.level_index,
                summary = %crash.summary,
                "level interrupted from outside: not stored"
            );
            self.run.crash = Some(crash.clone());
            self.ctx.store.put_run(&self.run).await?;
            return Err(Stop::Outside(format!(
                "host {}: level {} interrupted: {}",
                self.host, result.level_index, crash.summary
            )));
        }
        // Two sample intervals: the sample that covers the level's end is on its way.
        let gpu_power_w = self
            .level_power(result.started_unix_ms, result.finished_unix_ms)
            .await;
        let stored = self.trial.stored_level(
            self.run.run_id.clone(),
            &self.host,
            self.trial.attempts,
            result,
            gpu_power_w,
        );
        if !self.ctx.store.put_level(&stored).await? {
            tracing::warn!(
                level = stored.result.as_ref().map(|r| r.level_index),
                "level already stored; the repeated result is ignored"
            );
            return Ok(());
        }
        let c = &self.spec.configs[self.trial.config_index as usize];
        let api = self
            .spec
            .benchmark_request(self.trial.workload_index as usize)
            .workload
            .map(|w| w.api())
            .unwrap_or_default();
        self.ctx
            .metrics
            .level_stored_as(&stored, c.kind.as_str(), &c.model, api);
        if crashed {
            if let Some(class) = crash_class {
                self.ctx
                    .metrics
                    .crash(&self.host, &self.trial.config_name, class);
            }
            if let Some(crash) = stored.result.as_ref().and_then(|r| r.crash.clone()) {
                self.run.crash = Some(crash);
                self.ctx.store.put_run(&self.run).await?;
            }
        }
        self.ctx
            .hub
            .emit(&self.trial.job_id, job_event::Event::Level(stored))
            .await?;
        Ok(())
    }
}
