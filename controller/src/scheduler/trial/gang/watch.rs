//! Watching a gang's ranks above 0 while rank 0 runs its levels (see the parent module).

use super::*;

impl Ranks {
    /// Watches every rank above 0 while rank 0 runs levels: the first that leaves its ready
    /// state is noted (for the level's crash) and, if rank 0 has not ended its level within
    /// [`RANK_LOSS_GRACE`], resolves with the stop.
    pub(super) async fn watch_all(&self) -> String {
        let (i, what) = members::first_to_leave(&self.ranks).await;
        let (rank, host) = (i as u32 + 1, self.ranks[i].host.clone());
        self.note_loss(Loss {
            rank,
            host: host.clone(),
            what: what.clone(),
        });
        tokio::time::sleep(RANK_LOSS_GRACE).await;
        format!(
            "rank {rank} on host {host} ended mid-level ({what}) and rank 0 did not end its level \
             within {} s",
            RANK_LOSS_GRACE.as_secs()
        )
    }
}
