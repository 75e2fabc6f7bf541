//! Starting and stopping a gang's ranks: every rank's `ApplyEngine` at once, the first
//! failure stopping them all (see the parent module).

use super::*;

impl Ranks {
    /// Starts every rank at once; the first that fails stops them all. A rank that died of a
    /// lost peer (rank 0 whose peer died while starting) is not the cause when another rank
    /// reports its own failure within [`NAME_WAIT`]: that one is named.
    pub(super) async fn start_all(&self, a: &mut Attempt<'_>) -> Result<(), Stop> {
        let (ctx, spec, trial) = (a.ctx, a.spec, a.trial);
        let cancel = a.cancel.clone();
        type Started<'f> = std::pin::Pin<
            Box<
                dyn std::future::Future<Output = Result<(u32, members::Started), (u32, Stop, bool)>>
                    + Send
                    + 'f,
            >,
        >;
        let mut starts: futures::stream::FuturesUnordered<Started<'_>> = Default::default();
        for (i, r) in self.ranks.iter().enumerate() {
            let rank = i as u32 + 1;
            let mut engine = spec.engine_spec(trial.config_index as usize);
            engine.gang = Some(self.pb(rank));
            let cancel = cancel.clone();
            starts.push(Box::pin(async move {
                members::start_member(ctx, trial, r, engine, &cancel)
                    .await
                    .map(|s| (rank, s))
                    .map_err(|f| (rank, f.stop, f.peer_lost))
            }));
        }
        let rank0 = &mut *a;
        starts.push(Box::pin(async move {
            match rank0.apply().await {
                Ok(()) => Ok((0, members::Started::default())),
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
        let mut argvs: BTreeMap<u32, members::Started> = BTreeMap::new();
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
                for (i, r) in self.ranks.iter().enumerate() {
                    let started = argvs.remove(&(i as u32 + 1)).unwrap_or_default();
                    members::member_facts(&mut a.run, &format!("gang.rank{}", i + 1), r, &started);
                }
                a.ctx.store.put_run(&a.run).await?;
                Ok(())
            }
            Some((rank, stop, _)) => {
                members::stop_members(a.ctx, &self.ranks).await;
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
                Err(stop.prefixed(&who))
            }
        }
    }
}
