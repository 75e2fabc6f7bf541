//! Job events (replayed by `WatchJob`) and self-registered agents.

use std::collections::BTreeMap;

use fleetbench_proto::controllerpb::JobEvent;
use prost::Message;
use sqlx::Row;

use super::{Store, StoreError, decode, q};

/// An agent that called `RegisterAgent`.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredAgent {
    pub name: String,
    pub address: String,
    pub labels: BTreeMap<String, String>,
}

impl Store {
    /// Appends an event of a job; returns its sequence number (increasing per store).
    pub async fn append_event(&self, job_id: &str, event: &JobEvent) -> Result<i64, StoreError> {
        let blob = &event.encode_to_vec();
        self.retry
            .run("append event", move || async move {
                let mut tx = self.write_tx().await?;
                let seq = self.append_event_in(&mut tx, job_id, event, blob).await?;
                tx.commit().await.map_err(q("commit event"))?;
                Ok(seq)
            })
            .await
    }

    async fn append_event_in(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        job_id: &str,
        event: &JobEvent,
        blob: &[u8],
    ) -> Result<i64, StoreError> {
        let seq: i64 = sqlx::query(
            "INSERT INTO events (job_id, unix_ms, event) VALUES ($1, $2, $3) RETURNING seq",
        )
        .bind(job_id)
        .bind(event.unix_ms)
        .bind(blob)
        .fetch_one(&mut **tx)
        .await
        .and_then(|r| r.try_get("seq"))
        .map_err(q("append event"))?;
        Ok(seq)
    }

    /// The events of a job with their sequence numbers, oldest first.
    pub async fn events(&self, job_id: &str) -> Result<Vec<(i64, JobEvent)>, StoreError> {
        self.retry
            .run("list events", move || self.events_once(job_id))
            .await
    }

    async fn events_once(&self, job_id: &str) -> Result<Vec<(i64, JobEvent)>, StoreError> {
        let rows = sqlx::query("SELECT seq, event FROM events WHERE job_id = $1 ORDER BY seq")
            .bind(job_id)
            .fetch_all(&self.pool)
            .await
            .map_err(q("list events"))?;
        rows.iter()
            .map(|r| {
                let seq: i64 = r.try_get("seq").map_err(q("read event"))?;
                let b: Vec<u8> = r.try_get("event").map_err(q("read event"))?;
                Ok((seq, decode("event", &b)?))
            })
            .collect()
    }

    /// Records (or updates) a self-registered agent.
    pub async fn put_agent(&self, agent: &RegisteredAgent) -> Result<(), StoreError> {
        let labels = agent
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n");
        let labels = &labels;
        self.retry
            .run("put agent", move || async move {
                let mut tx = self.write_tx().await?;
                self.put_agent_in(&mut tx, agent, labels).await?;
                tx.commit().await.map_err(q("commit put agent"))
            })
            .await
    }

    async fn put_agent_in(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        agent: &RegisteredAgent,
        labels: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO agents (name, address, labels, registered_unix_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO UPDATE SET \
             address = excluded.address, labels = excluded.labels, \
             registered_unix_ms = excluded.registered_unix_ms",
        )
        .bind(&agent.name)
        .bind(&agent.address)
        .bind(labels)
        .bind(fleetbench_proto::now_unix_ms())
        .execute(&mut **tx)
        .await
        .map_err(q("put agent"))?;
        Ok(())
    }

    /// Every self-registered agent, by name.
    pub async fn agents(&self) -> Result<Vec<RegisteredAgent>, StoreError> {
        self.retry
            .run("list agents", move || self.agents_once())
            .await
    }

    async fn agents_once(&self) -> Result<Vec<RegisteredAgent>, StoreError> {
        let rows = sqlx::query("SELECT name, address, labels FROM agents ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(q("list agents"))?;
        rows.iter()
            .map(|r| {
                let labels: String = r.try_get("labels")?;
                Ok(RegisteredAgent {
                    name: r.try_get("name")?,
                    address: r.try_get("address")?,
                    labels: labels
                        .lines()
                        .filter_map(|l| l.split_once('='))
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(q("read agent"))
    }
}
