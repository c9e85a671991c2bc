//! The `keel` binary as `cargo build -p keel-cli` makes it (the default features)
//! exports its spans to an OTLP/HTTP receiver when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
//! The receiver here is a plain HTTP listener that records what is posted to it; the
//! span contents are checked against a real receiver (Arize Phoenix) by
//! scripts/otel-tests.sh.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// One request the receiver got: its request line, content type and body length.
#[derive(Debug)]
struct Posted {
    line: String,
    content_type: String,
    body: usize,
}

/// Accepts connections until the test ends, answering every request with 200.
fn receiver() -> (String, mpsc::Receiver<Posted>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let (mut length, mut content_type) = (0usize, String::new());
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':') {
                            match name.trim().to_ascii_lowercase().as_str() {
                                "content-length" => length = value.trim().parse().unwrap_or(0),
                                "content-type" => content_type = value.trim().to_owned(),
                                _ => {}
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = tx.send(Posted {
                        line: line.trim_end().to_owned(),
                        content_type,
                        body: length,
                    });
                    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if stream.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (endpoint, rx)
}

fn example(name: &str) -> String {
    format!("{}/../../examples/stack/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_default_binary_exports_spans_when_the_endpoint_variable_is_set() {
    let (endpoint, posted) = receiver();
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args([
            "run",
            "--config",
            &example("support.yaml"),
            "--transcript",
            &example("thread.jsonl"),
            "--script",
            &example("answers.jsonl"),
            "--json",
        ])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_METRICS_EXPORTER", "none")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("is ignored"), "{stderr}");
    // The binary flushes its spans before it exits, so they have arrived by now.
    let requests: Vec<Posted> =
        std::iter::from_fn(|| posted.recv_timeout(Duration::from_secs(2)).ok()).collect();
    let traces: Vec<&Posted> = requests
        .iter()
        .filter(|p| p.line.starts_with("POST /v1/traces "))
        .collect();
    assert!(
        !traces.is_empty(),
        "no POST /v1/traces reached {endpoint}; got {requests:?}; stderr: {stderr}"
    );
    assert!(
        traces
            .iter()
            .all(|p| p.content_type == "application/x-protobuf"),
        "{traces:?}"
    );
    assert!(traces.iter().any(|p| p.body > 0), "{traces:?}");
}
