//! Logs and traces: a `tracing` subscriber writing to stderr, plus an OpenTelemetry OTLP
//! exporter when an endpoint is configured. The only module that knows OpenTelemetry.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use crate::config::TelemetryConfig;
use crate::error::NodeError;

/// Keeps the trace exporter alive; flushes it on drop.
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("trace exporter shutdown: {err}");
        }
    }
}

/// Installs the global subscriber. Must run inside a Tokio runtime when OTLP is enabled.
pub fn init(config: &TelemetryConfig) -> Result<TelemetryGuard, NodeError> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log))
        .map_err(|e| NodeError::Telemetry(format!("log filter {:?}: {e}", config.log)))?;
    let logs = fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(true)
        .with_filter(filter);

    let endpoint = config
        .otlp_endpoint
        .clone()
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok());
    let (traces, provider) = match endpoint {
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(std::time::Duration::from_secs(3))
                .build()
                .map_err(|e| NodeError::Telemetry(format!("OTLP exporter: {e}")))?;
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(Resource::builder().with_service_name("statestore").build())
                .build();
            // Own filter: a quiet log level must not silence spans, and the exporter's own
            // HTTP/2 spans must not feed back into it.
            let spans = Targets::new()
                .with_target("statestore_node", LevelFilter::DEBUG)
                .with_target("statestore_raft", LevelFilter::INFO)
                .with_target("statestore_storage", LevelFilter::INFO);
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("statestore"))
                .with_filter(spans);
            (Some(layer), Some(provider))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|e| NodeError::Telemetry(e.to_string()))?;
    Ok(TelemetryGuard { provider })
}

/// Makes `span` a child of the W3C trace context in `traceparent` (an MQTT user property of the
/// request), so a client's trace continues through the store. Ignored when malformed or when no
/// OpenTelemetry layer is installed.
pub fn continue_remote_trace(
    span: &tracing::Span,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let Some(traceparent) = traceparent else {
        return;
    };
    let mut carrier = std::collections::HashMap::new();
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(tracestate) = tracestate {
        carrier.insert("tracestate".to_owned(), tracestate.to_owned());
    }
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(parent);
}
