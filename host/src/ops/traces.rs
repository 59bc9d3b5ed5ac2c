//! Traces over OTLP: the spans the host opens (`reconcile` per reconcile, and under it `api` per
//! request a guest's host call sends, `cache` per cache read, `wait` per read-your-writes wait)
//! exported to an OpenTelemetry collector or Jaeger, off unless an endpoint is named.
//!
//! Where it may surprise:
//! - Only `http://` endpoints (OTLP over HTTP with protobuf, port 4318 by convention): the
//!   exporter is built without TLS. Point it at a collector beside the host.
//! - Spans leave in batches, every few seconds and at exit: a trace shows up in Jaeger a moment
//!   after its reconcile, and one of a process killed with SIGKILL may never.
//! - Logs do not go this way; they stay on stdout.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint is not an `http://` URL.
    #[error(
        "OTLP endpoint {0:?} is not an http:// URL: traces go over OTLP/HTTP without TLS; name a collector beside the host, such as http://127.0.0.1:4318"
    )]
    Endpoint(String),
    /// The exporter could not be built.
    #[error("cannot set up the OTLP trace exporter for {endpoint}: {source}")]
    Exporter {
        /// Where traces were to go.
        endpoint: String,
        /// What the SDK said.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The endpoint traces go to: `flag` (`--otlp-endpoint`), else
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`, as the OpenTelemetry
/// specification orders them; `None`, and no traces, if none is set.
pub fn endpoint(flag: Option<&str>) -> Option<String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    flag.map(str::to_string)
        .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

/// The URL spans are posted to: the endpoint's `/v1/traces` unless it names a path already
/// (as `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` does).
fn traces_url(endpoint: &str) -> Result<String, Error> {
    let rest = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| Error::Endpoint(endpoint.to_string()))?;
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() {
        return Err(Error::Endpoint(endpoint.to_string()));
    }
    Ok(match rest.split_once('/') {
        Some((_, path)) if !path.is_empty() => format!("http://{rest}"),
        _ => format!("http://{rest}/v1/traces"),
    })
}

/// The exporter's provider: dropping it (or [`Traces::shutdown`]) sends what is left.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Sends the spans not yet sent and stops the exporter; waits at most a few seconds.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("reconciled: traces not all sent at exit: {e}");
        }
    }
}

/// A `tracing` layer exporting spans to `endpoint` as service `reconciled` (or
/// `OTEL_SERVICE_NAME`), and the provider to shut down at exit.
pub fn layer<S>(
    endpoint: &str,
) -> Result<
    (
        tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
        Traces,
    ),
    Error,
>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let url = traces_url(endpoint)?;
    // reqwest (shared with the OCI client) is built without a TLS provider of its own and
    // refuses to build a client until the process has one, even for plain HTTP; kube links
    // ring, so ring it is. A second install is refused harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url.clone())
        .with_timeout(std::time::Duration::from_secs(5))
        .build()
        .map_err(|source| Error::Exporter {
            endpoint: url,
            source,
        })?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "reconciled".into());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build(),
        )
        .build();
    let tracer = provider.tracer("reconciled");
    Ok((
        tracing_opentelemetry::layer().with_tracer(tracer),
        Traces { provider },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_endpoint_gets_the_traces_path_and_a_full_one_is_kept() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/custom/traces").unwrap(),
            "http://collector:4318/custom/traces"
        );
    }

    #[test]
    fn only_plain_http_endpoints_are_taken() {
        for bad in ["https://collector:4318", "collector:4318", "http://"] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
