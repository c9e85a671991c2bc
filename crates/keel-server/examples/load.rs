//! A loopback load test of the server: N concurrent streaming runs (one per thread),
//! each checked for loss and order, with time to first event, throughput, the server's
//! memory, and the CPU time the server adds per event over running the same agent in
//! process.
//!
//! ```sh
//! cargo run --release -p keel-server --example scripted_server -- --port 0 &   # note its PID and URL
//! cargo run --release -p keel-server --example load -- --url http://127.0.0.1:PORT \
//!     --runs 200 --server-pid PID [--pace-ms 5]
//! ```
//!
//! Exits with an error when a run is lost (an `end` event with another status than
//! success, or a final state without its answer) or an event arrives out of order (ids
//! not 0, 1, 2, ...). A server that sends no `end` event (langgraph-api) ends a run by
//! closing its stream. CPU times come from /proc (Linux; clock ticks of 10 ms).
//!
//! `--no-baseline` skips the in-process comparison (for a server that is not Keel, such
//! as `langgraph dev`). `--turns N` measures something else: N turns one after the other
//! on one thread, each turn's bytes streamed, time and server CPU, to show whether a
//! turn's cost grows with the thread:
//!
//! ```sh
//! cargo run --release -p keel-server --example load -- --url http://127.0.0.1:PORT \
//!     --turns 30 --server-pid PID [--stream-mode values,messages-tuple]
//! ```

#[path = "support/scripted.rs"]
mod scripted;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use keel_core::message::Message;
use keel_core::stream::StreamMode;
use keel_server::config::StackConfig;
use keel_store::Store;
use serde_json::{Value, json};
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// One request on its own connection; the response's status and body frames.
async fn send(
    host: &str,
    method: Method,
    path: &str,
    body: &Value,
) -> Result<(u16, hyper::body::Incoming), Error> {
    let stream = TcpStream::connect(host).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body)?)))?;
    let response = sender.send_request(request).await?;
    Ok((response.status().as_u16(), response.into_body()))
}

/// What one streamed run delivered.
struct RunReport {
    first_event: Duration,
    total: Duration,
    events: u64,
    /// Bytes of the stream's body.
    bytes: u64,
}

async fn new_thread(host: &str) -> Result<String, Error> {
    let (status, body) = send(host, Method::POST, "/threads", &json!({})).await?;
    let thread: Value = serde_json::from_slice(&body.collect().await?.to_bytes())?;
    if status != 200 {
        return Err(format!("creating a thread answered {status}").into());
    }
    Ok(thread["thread_id"].as_str().unwrap_or_default().to_owned())
}

async fn one_run(host: String, i: usize) -> Result<RunReport, Error> {
    let thread_id = new_thread(&host).await?;
    let modes = ["values", "updates", "messages-tuple"];
    stream_turn(
        &host,
        &thread_id,
        i,
        &format!("load run {i}: hello there"),
        &modes,
    )
    .await
}

/// One streaming run on `thread_id`, checked for loss and order.
async fn stream_turn(
    host: &str,
    thread_id: &str,
    i: usize,
    said: &str,
    modes: &[&str],
) -> Result<RunReport, Error> {
    let started = Instant::now();
    let (status, mut body) = send(
        host,
        Method::POST,
        &format!("/threads/{thread_id}/runs/stream"),
        &json!({
            "assistant_id": "agent",
            "input": {"messages": [{"role": "user", "content": said}]},
            "stream_mode": modes,
        }),
    )
    .await?;
    if status != 200 {
        return Err(format!("run {i}: the stream answered {status}").into());
    }
    let mut buffer = String::new();
    let mut first_event = None;
    let mut next_id = 0u64;
    let mut last_values = Value::Null;
    let mut ended = None;
    let mut bytes = 0u64;
    let mut answer_streamed = String::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        bytes += data.len() as u64;
        buffer.push_str(std::str::from_utf8(&data)?);
        if buffer.contains('\r') {
            // langgraph-api ends SSE lines with CRLF.
            buffer = buffer.replace("\r\n", "\n");
        }
        while let Some(cut) = buffer.find("\n\n") {
            let block: String = buffer.drain(..cut + 2).collect();
            let (mut event, mut id, mut payload) = ("", None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = v;
                } else if let Some(v) = line.strip_prefix("id: ") {
                    // Ids that are not 0, 1, 2, ... (langgraph-api's) are not checked.
                    id = v.parse::<u64>().ok();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    payload.push_str(v);
                }
            }
            if event.is_empty() && payload.is_empty() {
                continue; // a keep-alive comment
            }
            first_event.get_or_insert_with(|| started.elapsed());
            // Keel numbers events 0, 1, 2, ...; a server without ids is not checked.
            if let Some(id) = id
                && id != next_id
            {
                return Err(format!("run {i}: event {id} arrived where {next_id} was due").into());
            }
            next_id += 1;
            match event {
                "values" => last_values = serde_json::from_str(&payload)?,
                "messages" => {
                    let tuple: Value = serde_json::from_str(&payload)?;
                    if let Some(text) = tuple[0]["content"].as_str() {
                        answer_streamed.push_str(text);
                    }
                }
                "end" => {
                    let end: Value = serde_json::from_str(&payload)?;
                    if end["status"] != "success" {
                        return Err(format!("run {i} ended {}", end["status"]).into());
                    }
                    ended = Some(true);
                }
                "error" => return Err(format!("run {i} failed: {payload}").into()),
                _ => {}
            }
        }
    }
    let answer = match last_values["messages"].as_array().and_then(|m| m.last()) {
        Some(m) => m["content"].as_str().unwrap_or_default().to_owned(),
        // Without values in the stream, the answer is what the messages carried.
        None => answer_streamed,
    };
    // No `end` event at all: the server ends a run by closing the stream.
    let ended = ended.unwrap_or(true);
    let expected = format!(
        "You said: {}",
        said.split_whitespace()
            .take(12)
            .collect::<Vec<_>>()
            .join(" ")
    );
    if !ended || !answer.starts_with(&expected) {
        return Err(format!("run {i} lost: ended={ended}, last answer {answer:?}").into());
    }
    Ok(RunReport {
        first_event: first_event.unwrap_or_default(),
        total: started.elapsed(),
        events: next_id,
        bytes,
    })
}

/// `--turns N`: N turns one after the other on one thread.
async fn sequential(
    host: &str,
    turns: usize,
    modes: &[&str],
    pid: Option<&str>,
) -> Result<(), Error> {
    let thread_id = new_thread(host).await?;
    println!("turn  bytes streamed  events  time ms  server CPU ms");
    let mut rows = Vec::new();
    for turn in 1..=turns {
        let cpu = pid.and_then(cpu_seconds);
        let said = format!("turn {turn}: hello there");
        let r = stream_turn(host, &thread_id, turn, &said, modes).await?;
        let cpu_ms = match (pid.and_then(cpu_seconds), cpu) {
            (Some(after), Some(before)) => (after - before) * 1000.0,
            _ => f64::NAN,
        };
        println!(
            "{turn:>4}  {:>14}  {:>6}  {:>7.1}  {cpu_ms:>13.0}",
            r.bytes,
            r.events,
            r.total.as_secs_f64() * 1000.0
        );
        rows.push((r, cpu_ms));
    }
    let (first, last) = (&rows[0].0, &rows[rows.len() - 1].0);
    println!(
        "last turn against the first: {:.2}x the bytes, {:.2}x the time",
        last.bytes as f64 / first.bytes.max(1) as f64,
        last.total.as_secs_f64() / first.total.as_secs_f64().max(1e-9),
    );
    // The line scripts/scaling.sh reads: the whole conversation's server CPU.
    let total: f64 = rows.iter().map(|r| r.1).sum();
    println!("server CPU total: {total:.0} ms over {turns} turns");
    let half = rows.len() / 2;
    if half > 0 {
        let cpu =
            |rows: &[(RunReport, f64)]| rows.iter().map(|r| r.1).sum::<f64>() / rows.len() as f64;
        println!(
            "server CPU per turn: first half {:.1} ms, second half {:.1} ms",
            cpu(&rows[..half]),
            cpu(&rows[half..])
        );
    }
    Ok(())
}

/// utime + stime of a process, in seconds (clock ticks of 10 ms).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// VmRSS and VmHWM of a process, in MiB.
fn rss_mib(pid: &str) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The same runs in this process, straight through `Agent::stream`: the agent's own
/// CPU time, which the server's is compared with.
async fn baseline(runs: usize, pace: Duration) -> Result<(f64, u64), Error> {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/keel.yaml");
    let stack = StackConfig::from_file(config)?;
    let store = Arc::new(Store::memory());
    let agent = stack.build_with_model(store, Arc::new(scripted::model(pace)), false)?;
    let before = cpu_seconds("self").unwrap_or(0.0);
    let tasks: Vec<_> = (0..runs)
        .map(|i| {
            let agent = agent.clone();
            tokio::spawn(async move {
                let input = vec![Message::human(format!("load run {i}: hello there"))];
                let modes = [
                    StreamMode::Values,
                    StreamMode::Updates,
                    StreamMode::Messages,
                ];
                let mut stream = agent.stream(&format!("baseline-{i}"), input, &modes);
                let mut events = 0u64;
                while stream.next().await.is_some() {
                    events += 1;
                }
                stream.finish().await.map(|_| events)
            })
        })
        .collect();
    let mut events = 0;
    for task in tasks {
        events += task.await??;
    }
    Ok((cpu_seconds("self").unwrap_or(0.0) - before, events))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let url = flag(&args, "--url").ok_or("--url http://127.0.0.1:PORT is required")?;
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let runs: usize = flag(&args, "--runs").map_or(Ok(200), |r| r.parse())?;
    let pace = Duration::from_millis(flag(&args, "--pace-ms").map_or(Ok(5), |p| p.parse())?);
    let pid = flag(&args, "--server-pid");
    if let Some(turns) = flag(&args, "--turns") {
        let modes = flag(&args, "--stream-mode").unwrap_or_else(|| "values,messages-tuple".into());
        let modes: Vec<&str> = modes.split(',').collect();
        return sequential(&host, turns.parse()?, &modes, pid.as_deref()).await;
    }
    let no_baseline = args.iter().any(|a| a == "--no-baseline");

    let cpu_before = pid.as_deref().and_then(cpu_seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|i| tokio::spawn(one_run(host.clone(), i)))
        .collect();
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for task in tasks {
        match task.await? {
            Ok(r) => reports.push(r),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let wall = started.elapsed();
    let server_cpu = match (pid.as_deref().and_then(cpu_seconds), cpu_before) {
        (Some(after), Some(before)) => Some(after - before),
        _ => None,
    };
    let memory = pid.as_deref().and_then(rss_mib);

    let mut firsts: Vec<Duration> = reports.iter().map(|r| r.first_event).collect();
    firsts.sort();
    let mut totals: Vec<Duration> = reports.iter().map(|r| r.total).collect();
    totals.sort();
    let events: u64 = reports.iter().map(|r| r.events).sum();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "runs: {} ok, {} lost or out of order",
        reports.len(),
        failures.len()
    );
    println!(
        "wall {:.2} s: {:.1} runs/s, {:.0} events/s ({events} events)",
        wall.as_secs_f64(),
        reports.len() as f64 / wall.as_secs_f64(),
        events as f64 / wall.as_secs_f64()
    );
    println!(
        "time to first event: p50 {:.1} ms, p99 {:.1} ms; run duration p50 {:.1} ms, p99 {:.1} ms",
        ms(percentile(&firsts, 50.0)),
        ms(percentile(&firsts, 99.0)),
        ms(percentile(&totals, 50.0)),
        ms(percentile(&totals, 99.0)),
    );
    if let Some((rss, peak)) = memory {
        println!("server memory: RSS {rss:.1} MiB, peak {peak:.1} MiB");
    }
    if let (Some(server_cpu), true) = (server_cpu, no_baseline) {
        println!(
            "CPU: server {server_cpu:.2} s for {} runs: {:.1} ms per run",
            reports.len(),
            server_cpu * 1000.0 / reports.len().max(1) as f64
        );
    } else if let Some(server_cpu) = server_cpu {
        let (agent_cpu, agent_events) = baseline(runs, pace).await?;
        println!(
            "CPU: server {server_cpu:.2} s for {events} events; the same runs in process {agent_cpu:.2} s ({agent_events} agent events); server overhead {:.1} us per event",
            (server_cpu - agent_cpu).max(0.0) * 1e6 / events.max(1) as f64
        );
    }
    for failure in failures.iter().take(5) {
        eprintln!("  {failure}");
    }
    if !failures.is_empty() {
        return Err(format!("{} of {runs} runs lost or out of order", failures.len()).into());
    }
    Ok(())
}
