//! The `tracing` subscriber of a command, and (with the `otel` feature) the export of
//! Keel's GenAI spans and counters to an OTLP/HTTP receiver (`docs/operations.md`,
//! "Tracing").

/// What `--otlp` and `OTEL_EXPORTER_OTLP_ENDPOINT` turned on; flushes the last spans
/// when dropped, so keep it until the command's work is done.
pub struct Guard {
    #[cfg(feature = "otel")]
    telemetry: Option<keel_otel::Telemetry>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        #[cfg(feature = "otel")]
        if let Some(telemetry) = self.telemetry.take()
            && let Err(e) = telemetry.shutdown()
        {
            eprintln!("keel: warning: {e}");
        }
    }
}

/// Installs the process's subscriber. `log` adds warnings (or what `RUST_LOG` asks
/// for) on stderr; `otlp` is the `--otlp` endpoint, which takes precedence over
/// `OTEL_EXPORTER_OTLP_ENDPOINT`. With neither an endpoint nor `log`, nothing is
/// installed and every span stays disabled.
pub fn init(
    otlp: Option<&str>,
    log: bool,
) -> Result<Guard, Box<dyn std::error::Error + Send + Sync>> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let fmt = log.then(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        // Colour only on a terminal: logs redirected to a file or a collector get plain
        // text, not escape codes.
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
    });
    #[cfg(feature = "otel")]
    {
        let config = match otlp {
            Some(endpoint) => keel_otel::OtelConfig::from_env_with_endpoint(endpoint)?,
            None => keel_otel::OtelConfig::from_env()?,
        };
        let telemetry = config
            .map(|config| keel_otel::Telemetry::otlp(&config))
            .transpose()?;
        let layer = telemetry.as_ref().map(|t| t.layer());
        if fmt.is_some() || layer.is_some() {
            let _ = tracing_subscriber::registry()
                .with(fmt)
                .with(layer)
                .try_init();
        }
        Ok(Guard { telemetry })
    }
    #[cfg(not(feature = "otel"))]
    {
        if let Some(endpoint) = otlp {
            return Err(format!(
                "--otlp {endpoint}: this keel was built without OpenTelemetry export (--no-default-features); build it with the `otel` feature, on by default"
            )
            .into());
        }
        // Never ignored without a word: the variable says the user expects traces.
        if let Some(endpoint) = std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT") {
            eprintln!(
                "keel: warning: OTEL_EXPORTER_OTLP_ENDPOINT={} is ignored: this keel was built without OpenTelemetry export (--no-default-features); build it with the `otel` feature, on by default",
                endpoint.to_string_lossy()
            );
        }
        if fmt.is_some() {
            let _ = tracing_subscriber::registry().with(fmt).try_init();
        }
        Ok(Guard {})
    }
}
