//! A small OTLP/gRPC trace collector for the trace tests: it accepts `ExportTraceServiceRequest`s
//! on a loopback port (as an OpenTelemetry Collector would) and keeps every span it received,
//! flattened to what the tests look at.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;

/// One received span.
#[derive(Debug, Clone)]
pub struct Span {
    /// Span name.
    pub name: String,
    /// Trace id, lower-case hex.
    pub trace_id: String,
    /// Span id, lower-case hex.
    pub span_id: String,
    /// Parent span id, lower-case hex; empty for a root span.
    pub parent_span_id: String,
    /// Attributes rendered as text (strings as they are, numbers and booleans formatted).
    pub attributes: HashMap<String, String>,
    /// Span ids of the spans this one links to.
    pub links: Vec<String>,
    /// Start, Unix nanoseconds.
    pub start_ns: u64,
    /// End, Unix nanoseconds.
    pub end_ns: u64,
    /// The exporting service (`service.name` resource attribute).
    pub service: String,
}

impl Span {
    /// The attribute `key`, if present.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Clone, Default)]
struct Sink {
    spans: Arc<Mutex<Vec<Span>>>,
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    received.push(Span {
                        name: span.name,
                        trace_id: hex::encode(&span.trace_id),
                        span_id: hex::encode(&span.span_id),
                        parent_span_id: hex::encode(&span.parent_span_id),
                        attributes: span
                            .attributes
                            .iter()
                            .map(|kv| {
                                (
                                    kv.key.clone(),
                                    text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                                )
                            })
                            .collect(),
                        links: span.links.iter().map(|l| hex::encode(&l.span_id)).collect(),
                        start_ns: span.start_time_unix_nano,
                        end_ns: span.end_time_unix_nano,
                        service: service.clone(),
                    });
                }
            }
        }
        self.spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(received);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running collector; stops when dropped.
pub struct Collector {
    address: SocketAddr,
    sink: Sink,
    _stop: oneshot::Sender<()>,
}

impl Collector {
    /// Starts a collector on a free loopback port (inside a Tokio runtime).
    pub fn start() -> Collector {
        Collector::start_on(0)
    }

    /// Starts a collector on loopback `port` (0: a free one).
    pub fn start_on(port: u16) -> Collector {
        let incoming = TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], port)))
            .expect("bind the collector");
        let address = incoming.local_addr().expect("collector address");
        let sink = Sink::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(sink.clone()))
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            });
        tokio::spawn(async move {
            if let Err(err) = server.await {
                eprintln!("OTLP collector stopped: {err}");
            }
        });
        Collector {
            address,
            sink,
            _stop: stop,
        }
    }

    /// The endpoint to give an OTLP/gRPC exporter.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.sink
            .spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
