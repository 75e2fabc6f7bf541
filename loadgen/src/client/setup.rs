//! Set-up calls made before a level runs (`/v1/models`, `/tokenize`): bounded in time so that
//! a hung server cannot stall `Runner::new`, over one connection kept for many calls (prompt
//! shaping makes one `/tokenize` call per prompt).

use bytes::Bytes;

use super::{Conn, Target};
use crate::error::FailureKind;

/// Limit on one set-up call, so that a hung server cannot stall `Runner::new`.
const SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A one-shot JSON call for set-up (`/v1/models`, `/tokenize`): status and body.
pub(crate) async fn call_json(
    target: &Target,
    method: http::Method,
    path: &str,
    body: Bytes,
) -> Result<(u16, Vec<u8>), String> {
    tokio::time::timeout(SETUP_TIMEOUT, call_json_inner(target, method, path, body))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {SETUP_TIMEOUT:?}")))
}

async fn call_json_inner(
    target: &Target,
    method: http::Method,
    path: &str,
    body: Bytes,
) -> Result<(u16, Vec<u8>), String> {
    let mut conn = Conn::open(target).await.map_err(|f| f.message)?;
    let resp = conn
        .send(target.request(method, path, body), &mut None)
        .await
        .map_err(|f| f.message)?;
    let (head, mut body) = resp.into_parts();
    let bytes = conn
        .read_body(&mut body, 64 << 20)
        .await
        .map_err(|e| e.to_string())?;
    Ok((head.status.as_u16(), bytes))
}

/// A connection kept for many set-up calls (prompt shaping makes one `/tokenize` call per prompt).
#[derive(Debug)]
pub(crate) struct SetupClient {
    target: Target,
    conn: Option<Conn>,
}

impl SetupClient {
    pub fn new(target: Target) -> Self {
        SetupClient { target, conn: None }
    }

    pub async fn call(
        &mut self,
        method: http::Method,
        path: &str,
        body: Bytes,
    ) -> Result<(u16, Vec<u8>), String> {
        let r = tokio::time::timeout(SETUP_TIMEOUT, self.call_inner(method, path, body)).await;
        r.unwrap_or_else(|_| {
            self.conn = None;
            Err(format!("no answer within {SETUP_TIMEOUT:?}"))
        })
    }

    async fn call_inner(
        &mut self,
        method: http::Method,
        path: &str,
        body: Bytes,
    ) -> Result<(u16, Vec<u8>), String> {
        for attempt in 0..2 {
            let usable = match self.conn.as_mut() {
                Some(c) => c.usable().await,
                None => false,
            };
            if !usable {
                self.conn = Some(Conn::open(&self.target).await.map_err(|f| f.message)?);
            }
            let conn = self.conn.as_mut().expect("connection opened above");
            let resp = conn
                .send(
                    self.target.request(method.clone(), path, body.clone()),
                    &mut None,
                )
                .await;
            let resp = match resp {
                Ok(r) => r,
                Err(f) if attempt == 0 && f.kind == FailureKind::StreamClosedEarly => {
                    self.conn = None; // a keep-alive connection the server had closed
                    continue;
                }
                Err(f) => return Err(f.message),
            };
            let (head, mut b) = resp.into_parts();
            let bytes = conn
                .read_body(&mut b, 64 << 20)
                .await
                .map_err(|e| e.to_string())?;
            return Ok((head.status.as_u16(), bytes));
        }
        Err("connection closed twice".into())
    }
}
