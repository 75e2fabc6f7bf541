//! W3C trace context (`traceparent`, `tracestate`) across gRPC calls, so that the spans an agent
//! creates for a controller's request sit in the controller's trace.
//!
//! - Client side: [`PropagateContext`] is a tonic interceptor
//!   (`AgentClient::with_interceptor(channel, PropagateContext)`) that writes the current span's
//!   context into the request metadata; [`inject_context`] does the same for one request.
//! - Server side: [`TraceContextLayer`] (`Server::builder().layer(TraceContextLayer)`) opens an
//!   `rpc.server` span per request whose parent is the caller's context, and runs the handler in
//!   it; handlers' own spans become its children. [`set_remote_parent`] does it for one span.
//!
//! The propagator is used directly rather than through the global one, so propagation works in
//! processes (and tests) that never called [`super::init`].

use std::task::{Context as TaskContext, Poll};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Writes the current span's trace context into gRPC request metadata.
pub fn inject_context(metadata: &mut MetadataMap) {
    inject_span_context(&tracing::Span::current(), metadata);
}

/// Writes `span`'s trace context into gRPC request metadata.
pub fn inject_span_context(span: &tracing::Span, metadata: &mut MetadataMap) {
    let cx = span.context();
    TraceContextPropagator::new().inject_context(&cx, &mut MetadataInjector(metadata));
}

/// The caller's trace context carried by a request's metadata (empty when there is none).
pub fn extract_context(metadata: &MetadataMap) -> opentelemetry::Context {
    extract_from_headers(metadata.as_ref())
}

fn extract_from_headers(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Makes `span` a child of the caller's span named in `metadata` (no-op when none is named).
pub fn set_remote_parent(span: &tracing::Span, metadata: &MetadataMap) {
    set_parent_from_headers(span, metadata.as_ref());
}

fn set_parent_from_headers(span: &tracing::Span, headers: &http::HeaderMap) {
    use opentelemetry::trace::TraceContextExt as _;
    let parent = extract_from_headers(headers);
    if parent.span().span_context().is_valid() {
        // Fails only when the span is disabled (no OpenTelemetry layer): nothing to link then.
        let _ = span.set_parent(parent);
    }
}

/// Tonic client interceptor that injects the current span's trace context into every call.
#[derive(Debug, Clone, Copy, Default)]
pub struct PropagateContext;

impl tonic::service::Interceptor for PropagateContext {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        inject_context(request.metadata_mut());
        Ok(request)
    }
}

/// Tower layer for a tonic server: each request runs inside an `rpc.server` span whose parent is
/// the trace context the caller sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceContextLayer;

impl<S> tower::Layer<S> for TraceContextLayer {
    type Service = TraceContextService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TraceContextService { inner }
    }
}

/// The service [`TraceContextLayer`] wraps around a server's routes.
#[derive(Debug, Clone)]
pub struct TraceContextService<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for TraceContextService<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = tracing::instrument::Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // gRPC paths are /package.Service/Method.
        let path = request.uri().path().trim_start_matches('/');
        let (service, method) = path.split_once('/').unwrap_or((path, ""));
        let span = tracing::info_span!(
            "rpc.server",
            otel.name = %path,
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
        );
        set_parent_from_headers(&span, request.headers());
        // Services may start work in `call` itself, not only when their future is polled.
        let future = span.in_scope(|| self.inner.call(request));
        future.instrument(span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{TraceContextExt as _, TraceId, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::layer::SubscriberExt;

    fn subscriber() -> (impl tracing::Subscriber + Send + Sync, SdkTracerProvider) {
        let provider = SdkTracerProvider::builder().build();
        let tracer = provider.tracer("test");
        let sub =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
        (sub, provider)
    }

    fn trace_id_of(span: &tracing::Span) -> TraceId {
        span.context().span().span_context().trace_id()
    }

    #[test]
    fn interceptor_writes_the_current_trace_and_server_layer_continues_it() {
        use tonic::service::Interceptor as _;
        use tower::{Layer as _, Service as _};

        let (sub, _provider) = subscriber();
        tracing::subscriber::with_default(sub, || {
            let client_span = tracing::info_span!("job");
            let client_trace = trace_id_of(&client_span);
            assert_ne!(client_trace, TraceId::INVALID);

            let request = client_span.in_scope(|| {
                PropagateContext
                    .call(tonic::Request::new(()))
                    .expect("interceptor never refuses")
            });
            let traceparent = request
                .metadata()
                .get("traceparent")
                .expect("traceparent set")
                .to_str()
                .unwrap()
                .to_string();
            assert!(
                traceparent.contains(&client_trace.to_string()),
                "{traceparent}"
            );

            // The server side sees the same trace in the handler's current span.
            let mut http_request = http::Request::new(());
            *http_request.uri_mut() = "/fleetbench.agent.v1.Agent/GetHost".parse().unwrap();
            http_request
                .headers_mut()
                .extend(request.metadata().clone().into_headers());
            let mut svc = TraceContextLayer.layer(tower::service_fn(|_req: http::Request<()>| {
                let seen = trace_id_of(&tracing::Span::current());
                std::future::ready(Ok::<_, std::convert::Infallible>(seen))
            }));
            let fut = svc.call(http_request);
            let seen = futures_lite_block_on(fut).unwrap();
            assert_eq!(seen, client_trace);
        });
    }

    #[test]
    fn no_incoming_context_starts_a_new_trace() {
        let (sub, _provider) = subscriber();
        tracing::subscriber::with_default(sub, || {
            let md = MetadataMap::new();
            assert!(!extract_context(&md).span().span_context().is_valid());
            let span = tracing::info_span!("rpc");
            set_remote_parent(&span, &md);
            assert_ne!(trace_id_of(&span), TraceId::INVALID);
        });
    }

    /// The futures in these tests are immediately ready; poll once without a runtime.
    fn futures_lite_block_on<F: std::future::Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        let waker = std::task::Waker::noop();
        let mut cx = TaskContext::from_waker(waker);
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("test future was not ready"),
        }
    }
}
