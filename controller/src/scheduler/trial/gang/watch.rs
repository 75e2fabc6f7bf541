//! Watching a gang's ranks above 0 while rank 0 runs its levels (see the parent module).

use super::*;

impl Ranks {
    /// Watches every rank above 0 while rank 0 runs levels: the first that leaves its ready
    /// state is noted (for the level's crash) and, if rank 0 has not ended its level within
    /// [`RANK_LOSS_GRACE`], resolves with the stop. A broken watch stream is left to the
    /// rank's lease (a partition ends it).
    pub(super) async fn watch_all(&self, run_id: String) -> String {
        if self.ranks.is_empty() {
            return std::future::pending().await;
        }
        let watches = self.ranks.iter().map(|r| {
            let run_id = rank_run_id(&run_id, r.rank);
            Box::pin(async move { (r, watch_rank(r, &run_id).await) })
        });
        let ((r, what), _, _) = select_all(watches).await;
        self.note_loss(Loss {
            rank: r.rank,
            host: r.host.clone(),
            what: what.clone(),
        });
        tokio::time::sleep(RANK_LOSS_GRACE).await;
        format!(
            "rank {} on host {} ended mid-level ({what}) and rank 0 did not end its level within \
             {} s",
            r.rank,
            r.host,
            RANK_LOSS_GRACE.as_secs()
        )
    }
}

/// Resolves when rank `r`'s engine leaves its ready state for run `run_id`, saying how.
async fn watch_rank(r: &Rank, run_id: &str) -> String {
    let mut c = r.client.clone();
    let req = WatchEngineRequest { keepalive_ms: 500 };
    let Ok(stream) = c.watch_engine(req).await else {
        return std::future::pending().await;
    };
    let mut stream = stream.into_inner();
    loop {
        let Ok(Some(ev)) = stream.message().await else {
            return std::future::pending().await;
        };
        let Some(engine_watch_event::Event::Status(s)) = ev.event else {
            continue;
        };
        if s.run_id == run_id && s.state == EngineState::Ready as i32 {
            continue;
        }
        let crash = s
            .last_crash
            .as_ref()
            .map(|c| c.summary.clone())
            .filter(|c| !c.is_empty());
        let state = EngineState::try_from(s.state).map_or("unknown".into(), |st| {
            st.as_str_name()
                .trim_start_matches("ENGINE_STATE_")
                .to_ascii_lowercase()
        });
        return match crash {
            Some(c) if s.run_id == run_id => format!("its engine is {state}: {c}"),
            _ => format!("its engine is {state}"),
        };
    }
}
