//! The transport's metrics: the engine's are in `railyard_engine::metrics`.
//!
//! Per-request gRPC instrumentation: a tower layer on the tonic server that opens a
//! tracing span for each request and observes `railyard_rpc_duration_seconds` by
//! service, method and status code when the response ends.
//!
//! The methods are known up front (from the services' descriptor sets), so a
//! request finds its histograms in a table that never changes: no lock and no
//! allocation per request beyond the boxed future, and a client inventing paths
//! cannot grow the label set (unknown paths share the `unknown` series).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use http_body::{Body, Frame, SizeHint};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Unit;
use prost::Message;
use tonic::Code;
use tower::{Layer, Service};
use tracing::Instrument;

/// The gRPC status codes by number, as the gRPC spec names them.
const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

fn code_index(code: Code) -> usize {
    (code as usize).min(CODE_NAMES.len() - 1)
}

/// One method's histograms, one per status code, made on first use.
#[derive(Debug)]
pub struct MethodStats {
    service: String,
    method: String,
    by_code: [OnceLock<Histogram>; 17],
}

impl MethodStats {
    fn new(service: &str, method: &str) -> Self {
        Self {
            service: service.to_string(),
            method: method.to_string(),
            by_code: Default::default(),
        }
    }

    fn observe(&self, code: Code, seconds: f64) {
        self.by_code[code_index(code)]
            // 500 µs to ~65 s: long polls wait up to a minute.
            .get_or_init(|| Histogram::new(exponential_buckets(0.0005, 2.0, 18)))
            .observe(seconds);
    }
}

/// The histograms of every method the server serves, by request path.
#[derive(Debug)]
pub struct RpcTable {
    by_path: HashMap<String, Arc<MethodStats>>,
    unknown: Arc<MethodStats>,
}

impl RpcTable {
    /// The table of the railyard, health and reflection services.
    pub fn new() -> Self {
        Self::from_descriptor_sets(&[
            railyard_proto::v1::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
        ])
    }

    fn from_descriptor_sets(sets: &[&[u8]]) -> Self {
        let mut by_path = HashMap::new();
        for bytes in sets {
            let set = match prost_types::FileDescriptorSet::decode(*bytes) {
                Ok(set) => set,
                Err(e) => {
                    // Compiled in, so this would be a build defect: count those
                    // methods as `unknown` rather than refuse to serve.
                    tracing::error!(error = %e, "cannot decode a service descriptor set");
                    continue;
                }
            };
            for file in set.file {
                let package = file.package();
                for service in &file.service {
                    let full = match package {
                        "" => service.name().to_string(),
                        p => format!("{p}.{}", service.name()),
                    };
                    for method in &service.method {
                        let path = format!("/{full}/{}", method.name());
                        by_path.insert(path, Arc::new(MethodStats::new(&full, method.name())));
                    }
                }
            }
        }
        Self {
            by_path,
            unknown: Arc::new(MethodStats::new("unknown", "unknown")),
        }
    }

    fn lookup(&self, path: &str) -> Arc<MethodStats> {
        self.by_path.get(path).unwrap_or(&self.unknown).clone()
    }
}

impl Default for RpcTable {
    fn default() -> Self {
        Self::new()
    }
}

impl Collector for RpcTable {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "railyard_rpc_duration",
            "gRPC requests by service, method and status code: time from request to the end of the response.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        let mut methods: Vec<&Arc<MethodStats>> = self.by_path.values().collect();
        methods.push(&self.unknown);
        methods.sort_by(|a, b| (&a.service, &a.method).cmp(&(&b.service, &b.method)));
        for m in methods {
            for (code, slot) in CODE_NAMES.iter().zip(&m.by_code) {
                if let Some(histogram) = slot.get() {
                    let labels = [
                        ("service", m.service.as_str()),
                        ("method", m.method.as_str()),
                        ("code", code),
                    ];
                    histogram.encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

/// Wraps the gRPC server's routes in [`RpcService`].
#[derive(Debug, Clone)]
pub struct RpcLayer {
    table: Arc<RpcTable>,
}

impl RpcLayer {
    pub(crate) fn new(table: Arc<RpcTable>) -> Self {
        Self { table }
    }
}

/// The `/metrics` of a node without an engine (a follower): the calls it served,
/// by method and status, and what its owner registers.
pub(crate) struct NodeMetrics {
    registry: prometheus_client::registry::Registry,
}

impl NodeMetrics {
    /// The RPC table `rpc` and what `extra` registers.
    pub(crate) fn new(
        rpc: Arc<RpcTable>,
        extra: impl FnOnce(&mut prometheus_client::registry::Registry),
    ) -> Self {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(rpc));
        extra(&mut registry);
        Self { registry }
    }

    /// The OpenMetrics text exposition.
    pub(crate) fn render(&self) -> String {
        railyard_engine::metrics::render(&self.registry)
    }
}

impl<S> Layer<S> for RpcLayer {
    type Service = RpcService<S>;

    fn layer(&self, inner: S) -> RpcService<S> {
        RpcService {
            inner,
            table: self.table.clone(),
        }
    }
}

/// A span per request (`rpc`, with `service`, `method`, and `code` once known) and
/// the latency histogram.
#[derive(Debug, Clone)]
pub struct RpcService<S> {
    inner: S,
    table: Arc<RpcTable>,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for RpcService<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResBody: Body + Unpin,
{
    type Response = http::Response<ObservedBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let stats = self.table.lookup(req.uri().path());
        let span = tracing::info_span!(
            "rpc",
            service = %stats.service,
            method = %stats.method,
            code = tracing::field::Empty,
        );
        let mut call = Call {
            stats,
            started: Instant::now(),
            code: None,
            span: span.clone(),
            done: false,
        };
        let response = span.in_scope(|| self.inner.call(req));
        Box::pin(
            async move {
                let response = match response.await {
                    Ok(r) => r,
                    Err(e) => {
                        call.finish(Code::Unknown);
                        return Err(e);
                    }
                };
                // A failed call answers with its status in the headers alone.
                call.code = grpc_status(response.headers());
                Ok(response.map(|inner| ObservedBody { inner, call }))
            }
            .instrument(span),
        )
    }
}

fn grpc_status(headers: &http::HeaderMap) -> Option<Code> {
    headers.get("grpc-status").map(|v| Code::from_bytes(v.as_bytes()))
}

/// One request in flight. Observed once: when its response ends, or when it is
/// dropped first (the client went away: `CANCELLED`, unless a status was sent).
struct Call {
    stats: Arc<MethodStats>,
    started: Instant,
    code: Option<Code>,
    span: tracing::Span,
    done: bool,
}

impl Call {
    fn finish(&mut self, code: Code) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let elapsed = self.started.elapsed();
        self.stats.observe(code, elapsed.as_secs_f64());
        let name = CODE_NAMES[code_index(code)];
        self.span.record("code", name);
        self.span.in_scope(|| {
            tracing::debug!(
                code = name,
                elapsed_ms = elapsed.as_secs_f64() * 1e3,
                "rpc finished"
            )
        });
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.finish(self.code.unwrap_or(Code::Cancelled));
    }
}

/// A response body that reads the status from the trailers and finishes the
/// [`Call`] when the stream ends. Streamed responses are polled inside the span.
pub struct ObservedBody<B> {
    inner: B,
    call: Call,
}

impl<B: Body + Unpin> Body for ObservedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = {
            let _entered = this.call.span.enter();
            Pin::new(&mut this.inner).poll_frame(cx)
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(grpc_status) {
                    this.call.code = Some(code);
                }
            }
            Poll::Ready(Some(Err(_))) => this.call.finish(Code::Internal),
            // The end: a gRPC response always carries a status, so none means broken.
            Poll::Ready(None) => {
                let code = this.call.code.unwrap_or(Code::Unknown);
                this.call.finish(code);
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_method_has_a_row_and_other_paths_share_one() {
        let table = RpcTable::new();
        let poll = table.lookup("/railyard.v1.Tasks/PollStepTask");
        assert_eq!(
            (poll.service.as_str(), poll.method.as_str()),
            ("railyard.v1.Tasks", "PollStepTask")
        );
        let health = table.lookup("/grpc.health.v1.Health/Check");
        assert_eq!(health.method, "Check");
        assert!(
            table
                .by_path
                .contains_key("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
        );
        let made_up = table.lookup("/x.Y/Z");
        assert!(Arc::ptr_eq(&made_up, &table.unknown));
    }

    #[test]
    fn only_observed_codes_are_exported() {
        let table = Arc::new(RpcTable::new());
        table
            .lookup("/railyard.v1.History/StartRun")
            .observe(Code::Ok, 0.002);
        table
            .lookup("/railyard.v1.History/StartRun")
            .observe(Code::NotFound, 0.001);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(table));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let counts: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("railyard_rpc_duration_seconds_count"))
            .collect();
        assert_eq!(
            counts,
            [
                r#"railyard_rpc_duration_seconds_count{service="railyard.v1.History",method="StartRun",code="OK"} 1"#,
                r#"railyard_rpc_duration_seconds_count{service="railyard.v1.History",method="StartRun",code="NOT_FOUND"} 1"#,
            ]
        );
    }
}
