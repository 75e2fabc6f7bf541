//! A small HTTP/1 client for the engine's readiness probe and `/metrics` on loopback.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Cheap to clone; connections are pooled.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Empty<Bytes>>,
}

/// A GET's answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpClient {
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        HttpClient { client }
    }

    /// GET `url` within `timeout` (whole exchange, body included); the error says what failed.
    pub async fn get(
        &self,
        url: &str,
        timeout: Duration,
        max_body: usize,
    ) -> Result<Reply, String> {
        self.call(http::Method::GET, url, timeout, max_body).await
    }

    /// POST to `url` with an empty body (an engine's cache flush).
    pub async fn post(
        &self,
        url: &str,
        timeout: Duration,
        max_body: usize,
    ) -> Result<Reply, String> {
        self.call(http::Method::POST, url, timeout, max_body).await
    }

    async fn call(
        &self,
        method: http::Method,
        url: &str,
        timeout: Duration,
        max_body: usize,
    ) -> Result<Reply, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("bad URL {url}: {e}"))?;
        let req = http::Request::builder()
            .method(method)
            .uri(uri)
            .body(Empty::new())
            .map_err(|e| format!("bad request for {url}: {e}"))?;
        let fut = async {
            let resp = self.client.request(req).await.map_err(|e| describe(&e))?;
            let status = resp.status().as_u16();
            let body = http_body_util::Limited::new(resp.into_body(), max_body)
                .collect()
                .await
                .map_err(|e| format!("reading body: {e}"))?
                .to_bytes();
            Ok(Reply {
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            })
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
        }
    }
}

fn describe(e: &hyper_util::client::legacy::Error) -> String {
    use std::error::Error;
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s = format!("{s}: {inner}");
        src = inner.source();
    }
    s
}
