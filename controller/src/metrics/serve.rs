//! The Prometheus scrape endpoint: `GET /metrics` in the text exposition format.

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;

use super::Metrics;

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

fn router(metrics: Arc<Metrics>) -> axum::Router {
    axum::Router::new()
        .route("/metrics", get(scrape))
        .with_state(metrics)
}

async fn scrape(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(CONTENT_TYPE, TEXT_FORMAT)], metrics.render_prometheus())
}

/// Serves `/metrics` on `listener` until the task is dropped or the listener fails.
pub async fn serve(
    metrics: Arc<Metrics>,
    listener: tokio::net::TcpListener,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics)).await
}

/// Serves `/metrics` on `listener` until `shutdown` completes.
pub async fn serve_until(
    metrics: Arc<Metrics>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics))
        .with_graceful_shutdown(shutdown)
        .await
}
