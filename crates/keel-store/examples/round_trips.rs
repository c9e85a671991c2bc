//! The floor under a replayed session-memory turn on SQLite: bare sqlx round trips of
//! the same shape as a turn, with none of Keel's work around them.
//!
//! ```text
//! cargo run --release -p keel-store --example round_trips -- --turns 100000 --writes 2 --reads 1
//! cargo run --release -p keel-store --example round_trips -- --turns 100000 --writes 2 --reads 2 --pool 4
//! ```
//!
//! Each turn makes `--writes` one-row `INSERT ... RETURNING` statements (a recorded
//! message: about 300 bytes of JSON, a key and a timestamp) and `--reads` one-row
//! `SELECT`s by key (a state read or a count), one after the other, on a temporary
//! SQLite file in WAL mode with `synchronous = NORMAL`, as `keel replay` opens it: a
//! pool of `--pool` connections (default 1) on a current-thread runtime. Prints the
//! wall time, the process's CPU time (user + system) and both per round trip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a measuring tool: fail loudly

use std::str::FromStr;
use std::time::Instant;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

/// The process's CPU time so far (user + system), in seconds (Linux: `/proc/self/stat`,
/// in clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after its ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    ticks(11).unwrap_or(0.0) / 100.0 + ticks(12).unwrap_or(0.0) / 100.0
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let turns = arg(&args, "--turns", 100_000);
    let writes = arg(&args, "--writes", 2);
    let reads = arg(&args, "--reads", 1);
    let pool_size = u32::try_from(arg(&args, "--pool", 1)).unwrap().max(1);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("trips.db").display());
    let options = SqliteConnectOptions::from_str(&url)
        .unwrap()
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal);
    let pool = SqlitePoolOptions::new()
        .max_connections(pool_size)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE rows (session TEXT NOT NULL, id TEXT NOT NULL, at INTEGER NOT NULL, \
         body TEXT NOT NULL, PRIMARY KEY (session, id))",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("CREATE INDEX rows_at ON rows (session, at, id)")
        .execute(&pool)
        .await
        .unwrap();
    let body = format!(
        "{{\"type\":\"human\",\"data\":{{\"content\":\"{}\"}}}}",
        "x".repeat(260)
    );
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut at = 0_i64;
    for turn in 0..turns {
        for w in 0..writes {
            at += 1;
            let _: (String, i64) = sqlx::query_as(
                "INSERT INTO rows (session, id, at, body) VALUES ($1, $2, $3, $4) \
                 RETURNING id, at",
            )
            .bind("s")
            .bind(format!("m{turn}-{w}"))
            .bind(at)
            .bind(&body)
            .fetch_one(&pool)
            .await
            .unwrap();
        }
        for _ in 0..reads {
            let _: (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM rows WHERE session = $1 AND at > $2")
                    .bind("s")
                    .bind(at - 40)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let trips = (turns * (writes + reads)) as f64;
    println!(
        "{turns} turns x ({writes} writes + {reads} reads), pool of {pool_size}: \
         wall {wall:.2} s, CPU {cpu:.2} s; per round trip {:.1} us wall, {:.1} us CPU",
        wall / trips * 1e6,
        cpu / trips * 1e6
    );
}
