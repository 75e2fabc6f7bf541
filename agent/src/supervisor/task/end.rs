//! How an engine ends: its child exiting on its own (classified as a crash or not), a stop
//! asked for (the group's stop sequence), and the release of its port and GPUs after it.

use super::*;
use fleetbench_engines::crash::OUTSIDE_SIGNALS;
use fleetbench_proto::Word;

impl Task {
    /// The engine's child exited on its own.
    pub(super) async fn on_exit(&mut self, status: std::io::Result<std::process::ExitStatus>) {
        let Some(e) = &mut self.engine else { return };
        use std::os::unix::process::ExitStatusExt;
        let (code, signal) = match &status {
            Ok(s) => (s.code(), s.signal()),
            Err(_) => (None, None),
        };
        // Let the output readers catch up so the crash carries the last lines (workers may
        // keep the pipes open: bounded wait).
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut e.output_done).await;
        while let Ok(f) = e.facts_rx.try_recv() {
            match e.facts.iter_mut().find(|x| x.key == f.key) {
                Some(x) => x.value = f.value,
                None => e.facts.push(f),
            }
        }
        let msg = match (code, signal) {
            (Some(c), _) => format!("engine exited with code {c}"),
            (_, Some(s)) => format!("engine killed by signal {s}"),
            _ => "engine exited".to_string(),
        };
        // The agent was not stopping it (a stop takes the engine first), so a termination
        // signal came from elsewhere: the kernel's OOM killer if our cgroup counted a kill since
        // the spawn, else someone outside fleetbench (unknown counts read as outside) or the
        // engine itself, which only its log can tell: `classify` asks the engine's module.
        let terminated = signal.is_some_and(|s| OUTSIDE_SIGNALS.contains(&s));
        let kernel = signal == Some(9)
            && matches!(
                (e.oom_kills_at_spawn, super::super::oom::kills()),
                (Some(before), Some(now)) if now > before
            );
        self.fail_running(
            ExitInfo {
                code,
                signal,
                from_outside: terminated && !kernel,
                oom_killer: kernel,
                ..Default::default()
            },
            msg,
        )
        .await;
    }

    pub(super) fn classify_now(
        &self,
        plan: &LaunchPlan,
        run_id: &str,
        info: ExitInfo,
        note: String,
    ) -> agentpb::Crash {
        let tail = self.logs.tail_text(run_id, CRASH_TAIL);
        let c = classify(plan.kind, &info, &tail);
        let mut crash = crate::convert::crash_to_proto(c, tail, info.code, info.signal);
        if crash.summary.is_empty() {
            crash.summary = note.clone();
        }
        if crash.message.is_empty() {
            crash.message = note;
        }
        crash
    }

    /// Publishes a classified failure of the running engine, then stops what is left of it.
    pub(super) async fn fail_running(&mut self, info: ExitInfo, note: String) {
        let Some(e) = &self.engine else { return };
        let crash = self.classify_now(&e.plan, &e.run_id, info, note);
        let facts = e.facts.clone();
        e.span.in_scope(|| {
            tracing::warn!(class = crash.class().word(), exception_type = %crash.exception_type, summary = %crash.summary, "engine failed")
        });
        // Published before the cleanup so a running benchmark learns of it at once.
        self.publish(|s| {
            s.state = EngineState::Failed;
            s.since_unix_ms = now_unix_ms();
            s.facts = facts;
            s.last_crash = Some(crash.clone());
        });
        let events = self.apply_events.take();
        send(&events, Event::Failed(crash));
        self.release().await;
    }

    /// Stops the engine, if any, and waits until it is released. Returns what happened.
    pub(super) async fn stop_engine(&mut self, reason: &str) -> Option<Stopped> {
        let pid = self.engine.as_ref()?.pid;
        if let Some(ev) = self.apply_events.take() {
            send(
                &Some(ev),
                Event::Stopping(Stopping {
                    pid,
                    reason: reason.into(),
                }),
            );
        }
        self.publish(|s| {
            s.state = EngineState::Stopping;
            s.since_unix_ms = now_unix_ms();
        });
        let stopped = self.release().await;
        self.publish(|s| {
            s.state = EngineState::Idle;
            s.pid = None;
            s.since_unix_ms = now_unix_ms();
        });
        stopped
    }

    /// Signals the group (stop signal, grace, SIGKILL), reaps the child, and waits until no
    /// process of the run holds GPU memory. `Stopped.took_s` runs from the stop signal until
    /// that memory is free: the time the next engine has to wait, which is what a restart
    /// costs (on an H200 a CUDA server's memory can outlive its exit by a fraction of a second).
    pub(super) async fn release(&mut self) -> Option<Stopped> {
        let mut e = self.engine.take()?;
        let span = tracing::info_span!(parent: &e.span, "engine.stop", pid = i64::from(e.pid), fleetbench.run.id = %e.run_id);
        let began = std::time::Instant::now();
        let outcome = async {
            let out = stop_sequence(
                &mut e.tracker,
                e.plan.stop_signal,
                e.plan.grace,
                KILL_WAIT,
                Duration::from_millis(50),
            )
            .await;
            let _ = tokio::time::timeout(Duration::from_secs(2), e.child.wait()).await;
            if out.gone {
                crate::supervisor::leftover::clear(&self.cfg.data_dir);
            }
            e.output_done.abort();
            // The run's scratch directory (temporary files, compile caches) goes with it.
            let scratch = crate::supervisor::spawn::scratch_dir(&self.cfg.data_dir, &e.run_id);
            if scratch.exists()
                && let Err(err) = std::fs::remove_dir_all(&scratch)
            {
                tracing::warn!(dir = %scratch.display(), error = %err, "scratch directory left behind");
            }
            let gpu_clear = wait_gpu_free(
                &self.gpus,
                &e.gpu_before,
                e.tracker.known_pids(),
                self.cfg.release_timeout,
            )
            .await;
            let took = began.elapsed();
            tracing::info!(
                killed = out.killed,
                gone = out.gone,
                gpu_clear,
                exit_s = out.took.as_secs_f64(),
                gpu_free_s = (took - out.took.min(took)).as_secs_f64(),
                took_s = took.as_secs_f64(),
                "stopped"
            );
            (out, took)
        }
        .instrument(span)
        .await;
        self.publish(|s| s.pid = None);
        let (outcome, took) = outcome;
        Some(Stopped {
            pid: e.pid,
            took_s: took.as_secs_f64(),
            killed: outcome.killed,
        })
    }
}
