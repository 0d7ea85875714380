//! The follower's gRPC routes: one generic forwarder ([`Forward`]) registered under
//! each `railyard.v1` service name, and health and reflection answered locally.
//!
//! The forwarder hands the request, as it came (path, metadata, body stream), to a
//! [`tonic::transport::Channel`] to the leader, which sets the leader's scheme and
//! authority, and hands the leader's response back as it comes (a stream stays a
//! stream). Only [`PEER_SUBJECT`] is removed: no client may claim a certificate
//! subject (the leader removes it too).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use railyard_proto::v1::{
    admin_server::AdminServer, batches_server::BatchesServer, capacity_server::CapacityServer,
    history_server::HistoryServer, schedules_server::SchedulesServer, tasks_server::TasksServer,
    triggers_server::TriggersServer,
};
use tonic::server::NamedService;
use tower::Service;

use super::Forwarding;
use crate::grpc::peer::PEER_SUBJECT;

/// The services forwarded to the leader.
const FORWARDED: [&str; 7] = [
    <HistoryServer<crate::grpc::history::HistoryService> as NamedService>::NAME,
    <TasksServer<crate::grpc::tasks::TasksService> as NamedService>::NAME,
    <SchedulesServer<crate::grpc::schedules::SchedulesService> as NamedService>::NAME,
    <AdminServer<crate::grpc::admin::AdminService> as NamedService>::NAME,
    <TriggersServer<crate::grpc::triggers::TriggersService> as NamedService>::NAME,
    <BatchesServer<crate::grpc::batches::BatchesService> as NamedService>::NAME,
    <CapacityServer<crate::grpc::capacity::CapacityService> as NamedService>::NAME,
];

/// The follower's routes: the forwarded services, health (each of them serving: a
/// follower serves them by forwarding) and reflection.
pub(super) async fn routes(forwarding: Arc<Forwarding>) -> tonic::service::Routes {
    let (reporter, health) = tonic_health::server::health_reporter();
    let mut router = axum::Router::new();
    for name in FORWARDED {
        reporter
            .set_service_status(name, tonic_health::ServingStatus::Serving)
            .await;
        router = router.route_service(&format!("/{name}/{{*rest}}"), Forward(forwarding.clone()));
    }
    let router = router.fallback(|| async {
        let (parts, ()) = tonic::Status::unimplemented("").into_http::<()>().into_parts();
        http::Response::from_parts(parts, tonic::body::Body::empty())
    });
    crate::add_reflection(tonic::service::Routes::from(router).add_service(health))
}

/// Forwards one gRPC call to the leader.
#[derive(Clone)]
struct Forward(Arc<Forwarding>);

impl Service<http::Request<axum::body::Body>> for Forward {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<axum::body::Body>) -> Self::Future {
        let forwarding = self.0.clone();
        Box::pin(async move { Ok(forward(&forwarding, req).await) })
    }
}

async fn forward(
    forwarding: &Forwarding,
    mut req: http::Request<axum::body::Body>,
) -> http::Response<tonic::body::Body> {
    let Some(target) = forwarding.target() else {
        forwarding.ask_again();
        forwarding.counters.failed("grpc");
        return unavailable(format!(
            "this node ({}) is a follower and knows no leader now (none holds the database's \
             writer lease); try again shortly",
            forwarding.node()
        ));
    };
    let leader = &target.leader;
    if leader.grpc.is_empty() {
        forwarding.ask_again();
        forwarding.counters.failed("grpc");
        return unavailable(format!(
            "this node ({}) is a follower; the leader, node {}, is starting and has not said its \
             address yet; try again shortly",
            forwarding.node(),
            leader.node
        ));
    }
    if target.earlier_self {
        forwarding.ask_again();
        forwarding.counters.failed("grpc");
        return unavailable(format!(
            "this node ({}) is a follower of node {}, an earlier run of this node on the same address \
             that is gone; it takes the writer lease over when that lease ends (within --node-lease); \
             try again shortly",
            forwarding.node(),
            leader.node
        ));
    }
    req.headers_mut().remove(PEER_SUBJECT);
    // The channel puts the leader's scheme and authority on the path.
    if let Some(path) = req.uri().path_and_query().cloned() {
        *req.uri_mut() = http::Uri::from(path);
    }
    let deadline = grpc_timeout(req.headers());
    let mut channel = target.channel.clone();
    let req = req.map(tonic::body::Body::new);
    let call = async move {
        std::future::poll_fn(|cx| channel.poll_ready(cx)).await?;
        channel.call(req).await
    };
    let answer = match deadline {
        // A little early, so the caller gets this answer rather than its own timeout.
        Some(d) => tokio::time::timeout(d.saturating_sub((d / 5).min(Duration::from_secs(1))), call)
            .await
            .ok(),
        None => Some(call.await),
    };
    match answer {
        Some(Ok(response)) => {
            forwarding.counters.forwarded("grpc");
            response
        }
        Some(Err(e)) => {
            forwarding.ask_again();
            forwarding.counters.failed("grpc");
            tracing::warn!(node = %forwarding.node(), leader = %leader.node, grpc = %leader.grpc,
                error = %railyard_sdk::tls::error_chain(&e), "cannot forward a call to the leader");
            unavailable(format!(
                "this node ({}) is a follower and cannot reach the leader, node {} at {}: {}",
                forwarding.node(),
                leader.node,
                leader.grpc,
                railyard_sdk::tls::error_chain(&e)
            ))
        }
        None => {
            forwarding.ask_again();
            forwarding.counters.failed("grpc");
            unavailable(format!(
                "this node ({}) is a follower; the leader, node {} at {}, did not answer within \
                 the call's deadline",
                forwarding.node(),
                leader.node,
                leader.grpc
            ))
        }
    }
}

/// `UNAVAILABLE` with `message`, as a gRPC response.
fn unavailable(message: String) -> http::Response<tonic::body::Body> {
    tonic::Status::unavailable(message).into_http()
}

/// The call's `grpc-timeout` (`<digits><unit>`, at most 8 digits), if it sent one.
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_by_unit_and_bad_ones_are_ignored() {
        let t = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert("grpc-timeout", v.parse().unwrap());
            grpc_timeout(&h)
        };
        assert_eq!(t("5S"), Some(Duration::from_secs(5)));
        assert_eq!(t("250m"), Some(Duration::from_millis(250)));
        assert_eq!(t("2M"), Some(Duration::from_secs(120)));
        assert_eq!(t("S"), None);
        assert_eq!(t("5x"), None);
        assert_eq!(t("123456789S"), None);
    }
}
