//! `keel serve` as a user starts it: a bad keel.yaml ends with one line naming the key,
//! and examples/keel.yaml serves `/ok`, `/info` and the chat page.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

fn keel() -> Command {
    Command::new(env!("CARGO_BIN_EXE_keel"))
}

fn get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn a_bad_config_is_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("keel.yaml");
    std::fs::write(
        &config,
        "middleware:\n  - summarization: {enabled: true, trigger: [{type: tokens, value: 0}]}\n",
    )
    .unwrap();
    let out = keel()
        .args(["serve", "--database", "memory:", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("middleware[0].summarization"), "{stderr}");
}

#[test]
fn the_example_serves_ok_info_and_the_page() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/keel.yaml");
    let mut child = keel()
        .args([
            "serve",
            "--port",
            "0",
            "--database",
            "memory:",
            "--config",
            config,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let ok = get(&address, "/ok");
    let info = get(&address, "/info");
    let page = get(&address, "/");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.ends_with("{\"ok\":true}"),
        "{ok}"
    );
    assert!(info.contains("\"version\""), "{info}");
    assert!(page.contains("<title>Keel chat</title>"), "{page}");
}
