//! OpenTelemetry traces over OTLP/HTTP (protobuf), off unless an endpoint is
//! configured: `--otlp-endpoint`, `RAILYARD_OTLP_ENDPOINT`, the config file's
//! `telemetry.otlp_endpoint` (`otlp_endpoint` in a worker's), or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, in that order.
//!
//! The settings are read before logging starts (the exporter is a layer of the one
//! subscriber), by a narrow pass over the same layers the command reads in full
//! later. Spans leave through a batch processor on a thread of its own, which drops
//! spans when its queue is full: a slow or unreachable collector never blocks or
//! fails a request. What is exported: the server's step-attempt spans
//! (`railyard_engine::trace`) and the worker's step, model-call and tool-call spans
//! (`railyard_worker`), each run in its own trace.

use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider};
use railyard_config::{ConfigError, EnvVar, Loader};
use serde::{Deserialize, Serialize};

/// The environment variable of the endpoint, for the server and the worker alike.
pub(crate) const ENDPOINT_VAR: &str = "RAILYARD_OTLP_ENDPOINT";
/// The standard variables, read when Railyard's own settings name no endpoint.
const OTEL_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const OTEL_SERVICE_NAME_VAR: &str = "OTEL_SERVICE_NAME";
/// The path of traces under an OTLP/HTTP endpoint.
const TRACES_PATH: &str = "v1/traces";
/// How long one export may take before it is given up (its spans are dropped).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the spans still queued at exit may take to leave.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// `[telemetry]` of the server's config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TelemetrySection {
    /// The OTLP/HTTP endpoint traces are sent to (`http://collector:4318`).
    pub otlp_endpoint: Option<String>,
}

/// Where traces go, and as which service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exporting {
    /// The full URL of the traces (ending in `/v1/traces`).
    pub traces_url: String,
    /// `service.name`, unless `OTEL_SERVICE_NAME` says otherwise.
    pub service_name: &'static str,
}

/// The part of the server's config file read before logging starts.
#[derive(Debug, Default, Deserialize, Serialize)]
struct ServerView {
    #[serde(default)]
    telemetry: TelemetrySection,
}

/// The part of a worker's config file read before logging starts.
#[derive(Debug, Default, Deserialize, Serialize)]
struct WorkerView {
    otlp_endpoint: Option<String>,
}

const SERVER_ENV: &[EnvVar] = &[EnvVar {
    var: ENDPOINT_VAR,
    key: "telemetry.otlp_endpoint",
}];
const WORKER_ENV: &[EnvVar] = &[EnvVar {
    var: ENDPOINT_VAR,
    key: "otlp_endpoint",
}];

/// The server's (and `railyard dev`'s) export settings: `flag` over the environment
/// over the config file at `file`, else `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub(crate) fn server_exporting(
    file: Option<&std::path::Path>,
    flag: Option<String>,
    service_name: &'static str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Exporting>, ConfigError> {
    let flags = ServerView {
        telemetry: TelemetrySection { otlp_endpoint: flag },
    };
    let loaded = Loader::new()
        .file(file)?
        .env(SERVER_ENV, &env)
        .flags(&flags, &[("telemetry.otlp_endpoint", "--otlp-endpoint")])?
        .load::<ServerView>()?;
    let key = "telemetry.otlp_endpoint";
    resolve(
        loaded.value.telemetry.otlp_endpoint.as_deref(),
        service_name,
        &env,
    )
    .map_err(|e| loaded.invalid(key, e))
}

/// A worker's export settings, as [`server_exporting`] with the worker's flat key.
pub(crate) fn worker_exporting(
    file: Option<&std::path::Path>,
    flag: Option<String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Exporting>, ConfigError> {
    let loaded = Loader::new()
        .file(file)?
        .env(WORKER_ENV, &env)
        .flags(&WorkerView { otlp_endpoint: flag }, &[])?
        .load::<WorkerView>()?;
    resolve(loaded.value.otlp_endpoint.as_deref(), "railyard-worker", &env)
        .map_err(|e| loaded.invalid("otlp_endpoint", e))
}

/// The configured endpoint, else the standard variable's; checked.
fn resolve(
    configured: Option<&str>,
    service_name: &'static str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Exporting>, String> {
    let endpoint = match configured.map(str::trim).filter(|s| !s.is_empty()) {
        Some(e) => e.to_string(),
        None => match env(OTEL_ENDPOINT_VAR)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
        {
            Some(e) => e,
            None => return Ok(None),
        },
    };
    Ok(Some(Exporting {
        traces_url: traces_url(&endpoint)?,
        service_name,
    }))
}

/// The traces URL under an OTLP/HTTP endpoint: `/v1/traces` appended to its path,
/// unless it already ends so.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let mut url = reqwest::Url::parse(endpoint)
        .map_err(|e| format!("{} is not a URL: {e}", railyard_model::echo(endpoint)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{} is not an http:// or https:// URL (traces are sent over OTLP/HTTP)",
            railyard_model::echo(endpoint)
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{} has a query or fragment",
            railyard_model::echo(endpoint)
        ));
    }
    let path = url.path().trim_end_matches('/').to_string();
    if !path.ends_with(&format!("/{TRACES_PATH}")) {
        url.set_path(&format!("{path}/{TRACES_PATH}"));
    }
    Ok(url.to_string())
}

/// The trace and span ids of new spans: random, except for the server's step-attempt
/// spans, whose ids the run and the lease decide (`railyard_engine::trace`).
#[derive(Debug, Default)]
struct RunIds(RandomIdGenerator);

impl IdGenerator for RunIds {
    fn new_trace_id(&self) -> TraceId {
        match railyard_engine::trace::forced_ids() {
            Some((trace, _)) => TraceId::from_bytes(trace),
            None => self.0.new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match railyard_engine::trace::forced_ids() {
            Some((_, span)) => SpanId::from_bytes(span),
            None => self.0.new_span_id(),
        }
    }
}

/// The exporting tracer provider, installed as the global one; shut it down with
/// [`Telemetry::shutdown`] to send what is still queued.
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Starts exporting as `e` says. Nothing is sent until a span ends, and a
    /// collector that is down only costs the spans sent to it.
    pub(crate) fn start(e: &Exporting) -> anyhow::Result<Self> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(e.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|err| anyhow::anyhow!("cannot start the OTLP exporter to {}: {err}", e.traces_url))?;
        let mut resource = Resource::builder();
        if std::env::var_os(OTEL_SERVICE_NAME_VAR).is_none() {
            resource = resource.with_service_name(e.service_name);
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_id_generator(RunIds::default())
            .with_resource(resource.build())
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        railyard_engine::trace::enable();
        Ok(Self { provider })
    }

    /// The tracer of the worker's `tracing` spans.
    pub(crate) fn tracer(&self) -> SdkTracer {
        self.provider.tracer("railyard")
    }

    /// Sends the spans still queued (waiting at most a few seconds) and stops.
    pub(crate) fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(error = %e, "the last traces may not have reached the OTLP endpoint");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn off_unless_an_endpoint_is_named_and_the_flag_wins() {
        assert_eq!(server_exporting(None, None, "s", env(&[])).unwrap(), None);
        let e = server_exporting(None, None, "s", env(&[(OTEL_ENDPOINT_VAR, "http://otel:4318")]))
            .unwrap()
            .unwrap();
        assert_eq!(e.traces_url, "http://otel:4318/v1/traces");
        let both = env(&[
            (OTEL_ENDPOINT_VAR, "http://otel:4318"),
            (ENDPOINT_VAR, "http://ours:1/base/"),
        ]);
        let e = server_exporting(None, None, "s", &both).unwrap().unwrap();
        assert_eq!(e.traces_url, "http://ours:1/base/v1/traces");
        let e = server_exporting(None, Some("https://flag:2/v1/traces".into()), "s", &both)
            .unwrap()
            .unwrap();
        assert_eq!(e.traces_url, "https://flag:2/v1/traces");
        let w = worker_exporting(None, None, env(&[(ENDPOINT_VAR, "http://w:3")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (w.traces_url.as_str(), w.service_name),
            ("http://w:3/v1/traces", "railyard-worker")
        );
    }

    #[test]
    fn a_bad_endpoint_is_refused_naming_the_key_and_its_origin() {
        let e = server_exporting(None, Some("grpc://x:4317".into()), "s", env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--otlp-endpoint") && e.contains("telemetry.otlp_endpoint") && e.contains("http://"),
            "{e}"
        );
        let e = worker_exporting(None, None, env(&[(ENDPOINT_VAR, "not a url")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(ENDPOINT_VAR) && e.contains("otlp_endpoint"), "{e}");
    }

    #[test]
    fn the_config_file_sets_it_under_its_section() {
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("server.toml");
        std::fs::write(
            &server,
            "[server]\nlisten = \"127.0.0.1:1\"\n[telemetry]\notlp_endpoint = \"http://f:4\"\n",
        )
        .unwrap();
        let e = server_exporting(Some(&server), None, "s", env(&[]))
            .unwrap()
            .unwrap();
        assert_eq!(e.traces_url, "http://f:4/v1/traces");
        let worker = dir.path().join("worker.toml");
        std::fs::write(&worker, "slots = 2\notlp_endpoint = \"http://g:5\"\n").unwrap();
        let e = worker_exporting(Some(&worker), None, env(&[])).unwrap().unwrap();
        assert_eq!(e.traces_url, "http://g:5/v1/traces");
    }
}
