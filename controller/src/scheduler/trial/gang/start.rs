//! Starting and stopping a gang's ranks: every rank's `ApplyEngine` at once, the first
//! failure stopping them all (see the parent module).

use super::*;

impl Ranks {
    /// Starts every rank at once; the first that fails stops them all. A rank that died of a
    /// lost peer (rank 0 whose peer died while starting) is not the cause when another rank
    /// reports its own failure within [`NAME_WAIT`]: that one is named.
    pub(super) async fn start_all(&self, a: &mut Attempt<'_>) -> Result<(), Stop> {
        let (ctx, spec, trial) = (a.ctx, a.spec, a.trial);
        let run_id = a.run.run_id.clone();
        let cancel = a.cancel.clone();
        type Started<'f> = std::pin::Pin<
            Box<
                dyn std::future::Future<Output = Result<(u32, Vec<String>), (u32, Stop, bool)>>
                    + Send
                    + 'f,
            >,
        >;
        let mut starts: futures::stream::FuturesUnordered<Started<'_>> = Default::default();
        for r in &self.ranks {
            let (run_id, cancel) = (run_id.clone(), cancel.clone());
            starts.push(Box::pin(async move {
                self.start_rank(ctx, spec, trial, r, &run_id, &cancel)
                    .await
                    .map(|argv| (r.rank, argv))
                    .map_err(|(s, lost)| (r.rank, s, lost))
            }));
        }
        let rank0 = &mut *a;
        starts.push(Box::pin(async move {
            match rank0.apply().await {
                Ok(()) => Ok((0, Vec::new())),
                Err(s) => {
                    let lost = rank0
                        .run
                        .crash
                        .as_ref()
                        .is_some_and(|c| c.class() == CrashClass::RankLost);
                    Err((0, s, lost))
                }
            }
        }));
        let mut argvs: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        let mut failed: Option<(u32, Stop, bool)> = None;
        let mut until: Option<tokio::time::Instant> = None;
        loop {
            let next = match until {
                Some(t) => match tokio::time::timeout_at(t, starts.next()).await {
                    Ok(n) => n,
                    Err(_) => break,
                },
                None => starts.next().await,
            };
            match next {
                None => break,
                Some(Ok((rank, argv))) => {
                    argvs.insert(rank, argv);
                }
                Some(Err((rank, stop, lost))) => {
                    let replaces = match &failed {
                        None => true,
                        Some((_, _, was_lost)) => *was_lost && !lost,
                    };
                    if replaces {
                        failed = Some((rank, stop, lost));
                    }
                    match &failed {
                        Some((_, _, true)) => {
                            until.get_or_insert(tokio::time::Instant::now() + NAME_WAIT);
                        }
                        _ => break,
                    }
                }
            }
        }
        drop(starts);
        match failed {
            None => {
                for r in &self.ranks {
                    let argv = argvs.remove(&r.rank).unwrap_or_default();
                    let key = |k: &str| format!("gang.rank{}.{k}", r.rank);
                    for (k, v) in [
                        (key("host"), r.host.clone()),
                        (key("run_id"), rank_run_id(&run_id, r.rank)),
                        (key("argv"), argv.join(" ")),
                        (key("lease_epoch"), r.lease.epoch.to_string()),
                    ] {
                        a.run.facts.retain(|f| f.key != k);
                        a.run.facts.push(LogFact { key: k, value: v });
                    }
                }
                a.ctx.store.put_run(&a.run).await?;
                Ok(())
            }
            Some((rank, stop, _)) => {
                self.stop_all(a.ctx).await;
                if !a.ctx.is_deposed() {
                    a.stop_engine().await;
                }
                if rank > 0 {
                    self.blame(rank);
                }
                let host = if rank == 0 {
                    a.host.clone()
                } else {
                    self.ranks[rank as usize - 1].host.clone()
                };
                let who = format!(
                    "gang of {}: rank {rank} on host {host} could not start",
                    self.nnodes
                );
                Err(match stop {
                    Stop::Lost(m) => Stop::Lost(format!("{who}: {m}")),
                    Stop::HostFault(m) => Stop::HostFault(format!("{who}: {m}")),
                    Stop::Fenced(m) => Stop::Fenced(format!("{who}: {m}")),
                    Stop::Outside(m) => Stop::Outside(format!("{who}: {m}")),
                    Stop::Rejected(m) => Stop::Rejected(format!("{who}: {m}")),
                    s @ (Stop::Cancelled | Stop::Store(_)) => s,
                })
            }
        }
    }

    /// Starts one rank above 0; returns its argv.
    async fn start_rank(
        &self,
        ctx: &Ctx,
        spec: &JobSpec,
        trial: &TrialRow,
        r: &Rank,
        run_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<String>, (Stop, bool)> {
        let mut engine = spec.engine_spec(trial.config_index as usize);
        engine.gang = Some(self.pb(r.rank));
        let req = ApplyEngineRequest {
            spec: Some(engine),
            run_id: rank_run_id(run_id, r.rank),
            lease_epoch: r.lease.epoch,
        };
        let mut client = r.client.clone();
        let mut stream = tokio::select! {
            s = client.apply_engine(req) => s.map_err(|s| (classify("ApplyEngine", s), false))?.into_inner(),
            _ = cancel.cancelled() => return Err((Stop::Cancelled, false)),
        };
        let mut argv = Vec::new();
        loop {
            let msg = tokio::select! {
                m = stream.message() => m.map_err(|s| (classify("ApplyEngine stream", s), false))?,
                _ = cancel.cancelled() => return Err((Stop::Cancelled, false)),
            };
            let Some(ev) = msg else {
                return Err((
                    Stop::Lost("ApplyEngine ended before the engine was ready".into()),
                    false,
                ));
            };
            let host_ev = HostEngineEvent {
                host: r.host.clone(),
                run_id: rank_run_id(run_id, r.rank),
                event: Some(ev.clone()),
            };
            ctx.hub
                .emit(&trial.job_id, job_event::Event::Engine(host_ev))
                .await
                .map_err(|e| (Stop::Store(e), false))?;
            match ev.event {
                Some(engine_event::Event::Spawned(s)) => argv = s.argv,
                Some(engine_event::Event::Ready(_)) => return Ok(argv),
                Some(engine_event::Event::Failed(crash)) => {
                    let class = crash.class();
                    let lost = class == CrashClass::RankLost;
                    return Err((
                        if class == CrashClass::HostFault {
                            Stop::HostFault(crash.summary)
                        } else if class.not_the_configs() {
                            Stop::Outside(crash.summary)
                        } else {
                            Stop::Rejected(crash.summary)
                        },
                        lost,
                    ));
                }
                _ => {}
            }
        }
    }

    /// Stops every rank above 0 (bounded per host); a deposed controller leaves them to the
    /// new leader.
    pub(super) async fn stop_all(&self, ctx: &Ctx) {
        if ctx.is_deposed() {
            return;
        }
        let stops = self.ranks.iter().map(|r| async move {
            let mut c = r.client.clone();
            let req = StopEngineRequest {
                lease_epoch: r.lease.epoch,
            };
            let done = tokio::time::timeout(Duration::from_secs(60), c.stop_engine(req)).await;
            if !matches!(done, Ok(Ok(_))) {
                tracing::warn!(rank = r.rank, host = %r.host, "could not confirm the rank's engine stopped");
            }
        });
        futures::future::join_all(stops).await;
    }
}
