//! # keel-otel
//!
//! Exports the spans and counters Keel's crates make (`keel_core::telemetry`: the
//! OpenTelemetry GenAI semantic conventions, <https://opentelemetry.io/docs/specs/semconv/gen-ai/>)
//! to an OTLP receiver over HTTP/protobuf: a collector, Jaeger, Arize Phoenix, ...
//!
//! [`OtelConfig::from_env`] reads the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_SERVICE_NAME`, ...); [`Telemetry::otlp`] builds the exporters and
//! [`Telemetry::layer`] is the `tracing-subscriber` layer to add to the application's
//! subscriber. Nothing is exported, and no span is even created, without that layer.
//!
//! ```
//! use keel_otel::{OtelConfig, Telemetry};
//! use opentelemetry_sdk::trace::InMemorySpanExporter;
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let spans = InMemorySpanExporter::default();
//! let telemetry = Telemetry::from_exporters("demo", spans.clone(), None::<opentelemetry_sdk::metrics::InMemoryMetricExporter>);
//! let subscriber = tracing_subscriber::registry().with(telemetry.layer());
//! tracing::subscriber::with_default(subscriber, || {
//!     let span = keel_core::telemetry::agent_span(
//!         "thread-1",
//!         "run-1",
//!         &keel_core::model::ModelProfile::new("gpt-4o-mini", "openai"),
//!     );
//!     drop(span);
//! });
//! telemetry.flush().unwrap();
//! let finished = spans.get_finished_spans().unwrap();
//! assert_eq!(finished[0].name, "invoke_agent keel");
//! ```
//!
//! With an endpoint from the environment:
//!
//! ```no_run
//! use keel_otel::{OtelConfig, Telemetry};
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! if let Some(config) = OtelConfig::from_env()? {
//!     let telemetry = Telemetry::otlp(&config)?;
//!     tracing_subscriber::registry().with(telemetry.layer()).init();
//!     // ... run agents; then flush what is left:
//!     telemetry.shutdown()?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod export;

use keel_core::telemetry::{METRICS_TARGET, TARGET};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, filter_fn};
use tracing_subscriber::registry::LookupSpan;

pub use config::{
    CAPTURE_CONTENT_VAR, ConfigError, ENDPOINT_VAR, METRICS_EXPORTER_VAR, OtelConfig,
    SDK_DISABLED_VAR, SERVICE_NAME_VAR,
};
pub use export::GenAiExporter;

/// The instrumentation scope name of Keel's spans and counters.
pub const SCOPE: &str = "keel";

/// An error building the exporters or flushing them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The OTLP exporter could not be built.
    #[error("cannot build the OTLP exporter for {endpoint}: {source}")]
    Build {
        /// The endpoint it was built for.
        endpoint: String,
        /// Why.
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// Flushing or shutting down failed (the receiver is unreachable, say).
    #[error("cannot flush telemetry: {0}")]
    Flush(#[from] opentelemetry_sdk::error::OTelSdkError),
}

/// The tracer and meter providers behind [`Telemetry::layer`]. Call
/// [`shutdown`](Self::shutdown) before the process exits: spans are exported in batches,
/// and the last batch is sent then.
#[derive(Debug)]
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Exports to the OTLP/HTTP receiver `config` names: spans to `{endpoint}/v1/traces`,
    /// counters to `{endpoint}/v1/metrics` (unless `metrics` is off), in batches from
    /// background threads, so a slow receiver never holds up a run.
    pub fn otlp(config: &OtelConfig) -> Result<Self, Error> {
        use opentelemetry_otlp::WithExportConfig;
        keel_core::telemetry::set_capture_content(config.capture_content);
        let build = |source| Error::Build {
            endpoint: config.endpoint.clone(),
            source,
        };
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(config.signal_endpoint("traces"))
            .with_timeout(config.timeout)
            .build()
            .map_err(build)?;
        let resource = resource(&config.service_name);
        let tracer = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_batch_exporter(GenAiExporter::new(spans))
            .build();
        let meter = if config.metrics {
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.signal_endpoint("metrics"))
                .with_timeout(config.timeout)
                .build()
                .map_err(build)?;
            Some(
                SdkMeterProvider::builder()
                    .with_resource(resource)
                    .with_periodic_exporter(exporter)
                    .build(),
            )
        } else {
            None
        };
        Ok(Telemetry { tracer, meter })
    }

    /// Exports to the given exporters, each span as it ends and counters at
    /// [`shutdown`](Self::shutdown) (tests, or a backend without OTLP). Spans pass
    /// through [`GenAiExporter`] first, as with [`otlp`](Self::otlp).
    pub fn from_exporters<S, M>(service_name: &str, spans: S, metrics: Option<M>) -> Self
    where
        S: SpanExporter + 'static,
        M: PushMetricExporter,
    {
        let resource = resource(service_name);
        let tracer = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_simple_exporter(GenAiExporter::new(spans))
            .build();
        let meter = metrics.map(|exporter| {
            SdkMeterProvider::builder()
                .with_resource(resource)
                .with_periodic_exporter(exporter)
                .build()
        });
        Telemetry { tracer, meter }
    }

    /// The layer to add to a `tracing` subscriber: Keel's GenAI spans (and the events
    /// inside them, as span events) become OpenTelemetry spans, and its counter events
    /// OpenTelemetry counters. Other spans and events are left to the other layers.
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync + 'static>
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.tracer.tracer(SCOPE);
        let spans = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_filter(filter_fn(|meta| {
                if meta.is_span() {
                    meta.target() == TARGET
                } else {
                    meta.target().starts_with("keel")
                        && meta.target() != METRICS_TARGET
                        && *meta.level() <= LevelFilter::INFO
                }
            }));
        match &self.meter {
            Some(meter) => {
                let metrics = tracing_opentelemetry::MetricsLayer::new(meter.clone())
                    .with_filter(filter_fn(|meta| meta.target() == METRICS_TARGET));
                spans.and_then(metrics).boxed()
            }
            None => spans.boxed(),
        }
    }

    /// Exports everything not exported yet.
    pub fn flush(&self) -> Result<(), Error> {
        self.tracer.force_flush()?;
        if let Some(meter) = &self.meter {
            meter.force_flush()?;
        }
        Ok(())
    }

    /// Exports what is left and stops the exporters' threads.
    pub fn shutdown(&self) -> Result<(), Error> {
        let spans = self.tracer.shutdown();
        let metrics = self
            .meter
            .as_ref()
            .map_or(Ok(()), SdkMeterProvider::shutdown);
        spans?;
        metrics?;
        Ok(())
    }
}

/// The SDK's resource (`OTEL_RESOURCE_ATTRIBUTES`, `telemetry.sdk.*`) with the
/// configured `service.name`.
fn resource(service_name: &str) -> Resource {
    Resource::builder()
        .with_service_name(service_name.to_owned())
        .build()
}
