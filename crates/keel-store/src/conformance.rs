//! The conformance suite every backend passes: one definition of what a Keel store
//! must do, run against memory, SQLite and PostgreSQL (and usable on any other
//! [`Storage`] from another crate's tests).
//!
//! Test code, so it is compiled only with the `conformance` feature (off by default): a
//! crate whose tests run it names the feature in its `[dev-dependencies]`, as
//! `keel-store = { version = "...", features = ["conformance"] }`.
//!
//! Each check works in its own fresh namespace (a UUID v7 prefix on every id), so the
//! suite can run again and again on a shared database without cleanup. A check returns a
//! [`Failure`] naming itself and what it saw; nothing panics.
//!
//! ```
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use keel_store::{conformance, memory::MemoryStore};
//!
//! conformance::run_all(Arc::new(MemoryStore::new())).await?;
//! # Ok::<(), conformance::Failure>(())
//! # }).unwrap();
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_core::message::{Message, MessageBody, ToolCall};
use keel_core::state::{AgentState, MessageOp, StateUpdate};
use keel_core::store::{
    CheckpointWrite, Cursor, PutOutcome, SaveOutcome, SessionMemoryState, SessionScope, StoreError,
    StoredMessage,
};
use serde_json::{Map, Value, json};

use crate::Storage;

/// A conformance check that did not hold.
#[derive(Debug, thiserror::Error)]
#[error("conformance check `{check}` failed: {detail}")]
pub struct Failure {
    /// The check (the function of this module that failed).
    pub check: &'static str,
    /// What was expected and what happened.
    pub detail: String,
}

type Checked = Result<(), Failure>;

fn fail(check: &'static str, detail: impl Into<String>) -> Failure {
    Failure {
        check,
        detail: detail.into(),
    }
}

/// Turns a store error into a failure of `check`, saying which call failed.
fn call<T>(check: &'static str, what: &str, r: Result<T, StoreError>) -> Result<T, Failure> {
    r.map_err(|e| fail(check, format!("{what} returned an error: {e}")))
}

macro_rules! ensure {
    ($check:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(fail($check, format!($($fmt)+)));
        }
    };
}

/// Runs every check in order, then [`concurrent_cas`] and [`concurrent_checkpoints`]
/// with 64 tasks.
pub async fn run_all<S: Storage + 'static>(store: Arc<S>) -> Checked {
    chat_history(&*store).await?;
    idempotent_history(&*store).await?;
    stamped_history(&*store).await?;
    counted_history(&*store).await?;
    scope_isolation(&*store).await?;
    state_compare_and_swap(&*store).await?;
    purge(&*store).await?;
    checkpoints_append_only(&*store).await?;
    checkpoint_pages(&*store).await?;
    checkpoint_compare_and_swap(&*store).await?;
    checkpoint_forks(&*store).await?;
    summary_cache(&*store).await?;
    migrations_rerun(&*store).await?;
    concurrent_cas(store.clone(), 64).await?;
    concurrent_checkpoints(store, 64).await
}

fn namespace() -> String {
    keel_core::message::new_id()
}

fn msg(ts: i64, id: &str) -> StoredMessage {
    StoredMessage {
        timestamp_ms: ts,
        message: Message::human(format!("message {id}")).with_id(id),
    }
}

fn ids(messages: &[StoredMessage]) -> Vec<String> {
    messages.iter().map(|m| m.message.id().to_owned()).collect()
}

fn is_invalid<T>(r: &Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Invalid(_)))
}

/// Append, ordering by `(timestamp_ms, id)` with ids compared byte-wise, `last_n`,
/// `after` a cursor (ties broken by id), `count_after`, and all-or-nothing rejection of
/// empty or duplicate ids.
pub async fn chat_history<S: Storage>(store: &S) -> Checked {
    const C: &str = "chat_history";
    let ns = namespace();
    let scope = SessionScope::new(format!("{ns}-flow"), "user", "session", "ctx");

    // A message with tool calls, metadata and parts must come back exactly.
    let rich = StoredMessage {
        timestamp_ms: 30,
        message: Message::ai("checking the cluster")
            .with_tool_calls(vec![ToolCall::new("call_1", "lookup", json!({"q": "EU"}))])
            .with_metadata("hide_from_ui", json!(true))
            .with_id("m4"),
    };
    // Inserted out of order, in two batches; "m2B" < "m2a" byte-wise (a locale collation
    // would say the opposite).
    let first = [msg(20, "m3"), msg(10, "m2a"), msg(10, "m2B")];
    call(C, "append", store.append(&scope, &first).await)?;
    call(
        C,
        "append",
        store.append(&scope, &[msg(5, "m1"), rich.clone()]).await,
    )?;
    call(
        C,
        "append of an empty batch",
        store.append(&scope, &[]).await,
    )?;

    let all = call(C, "after(None)", store.after(&scope, None, 100).await)?;
    ensure!(
        C,
        ids(&all) == ["m1", "m2B", "m2a", "m3", "m4"],
        "after(None) gave {:?}, expected order by (timestamp, id byte-wise)",
        ids(&all)
    );
    ensure!(
        C,
        all[4] == rich,
        "a message did not round-trip: stored {:?}, read {:?}",
        rich,
        all[4]
    );
    ensure!(
        C,
        all.iter().map(|m| m.timestamp_ms).collect::<Vec<_>>() == [5, 10, 10, 20, 30],
        "timestamps did not round-trip"
    );

    let last = call(C, "last_n(2)", store.last_n(&scope, 2).await)?;
    ensure!(
        C,
        ids(&last) == ["m3", "m4"],
        "last_n(2) gave {:?}",
        ids(&last)
    );
    let none = call(C, "last_n(0)", store.last_n(&scope, 0).await)?;
    ensure!(C, none.is_empty(), "last_n(0) gave {:?}", ids(&none));
    let newest = call(C, "newest_timestamp", store.newest_timestamp(&scope).await)?;
    ensure!(
        C,
        newest == Some(30),
        "newest_timestamp gave {newest:?}, expected 30"
    );
    let empty = SessionScope::new(format!("{ns}-flow"), "user", "no-such-session", "ctx");
    let newest = call(C, "newest_timestamp", store.newest_timestamp(&empty).await)?;
    ensure!(
        C,
        newest.is_none(),
        "newest_timestamp of an empty session gave {newest:?}"
    );
    let many = call(C, "last_n(100)", store.last_n(&scope, 100).await)?;
    ensure!(
        C,
        ids(&many) == ids(&all),
        "last_n(100) gave {:?}",
        ids(&many)
    );

    let tie = all[1].cursor();
    let after_tie = call(C, "after(m2B)", store.after(&scope, Some(&tie), 100).await)?;
    ensure!(
        C,
        ids(&after_tie) == ["m2a", "m3", "m4"],
        "after the cursor (10, m2B) gave {:?}; the tie on timestamp must be broken by id",
        ids(&after_tie)
    );
    let one = call(C, "after(m2B, 1)", store.after(&scope, Some(&tie), 1).await)?;
    ensure!(
        C,
        ids(&one) == ["m2a"],
        "after(.., limit 1) gave {:?}",
        ids(&one)
    );
    let zero = call(C, "after(m2B, 0)", store.after(&scope, Some(&tie), 0).await)?;
    ensure!(
        C,
        zero.is_empty(),
        "after(.., limit 0) gave {:?}",
        ids(&zero)
    );

    let counts = [
        (None, 5),
        (Some(all[2].cursor()), 2),
        (Some(all[4].cursor()), 0),
        // A cursor between stored rows: (10, "m2") sorts before (10, "m2B").
        (
            Some(Cursor {
                timestamp_ms: 10,
                message_id: "m2".into(),
            }),
            4,
        ),
    ];
    for (cursor, expected) in counts {
        let n = call(
            C,
            "count_after",
            store.count_after(&scope, cursor.as_ref()).await,
        )?;
        ensure!(
            C,
            n == expected,
            "count_after({cursor:?}) = {n}, expected {expected}"
        );
        let read = call(C, "after", store.after(&scope, cursor.as_ref(), 100).await)?;
        ensure!(
            C,
            read.len() as u64 == expected,
            "after({cursor:?}) returned {} rows, count_after says {expected}",
            read.len()
        );
    }

    // Rejections leave nothing behind.
    let dup = store.append(&scope, &[msg(40, "m5"), msg(1, "m1")]).await;
    ensure!(
        C,
        is_invalid(&dup),
        "re-appending id m1 gave {dup:?}, expected Invalid"
    );
    let twice = store.append(&scope, &[msg(41, "m6"), msg(42, "m6")]).await;
    ensure!(
        C,
        is_invalid(&twice),
        "one id twice in a batch gave {twice:?}"
    );
    let empty = store.append(&scope, &[msg(43, "")]).await;
    ensure!(C, is_invalid(&empty), "an empty id gave {empty:?}");
    let nul = store.append(&scope, &[msg(44, "m\0")]).await;
    ensure!(C, is_invalid(&nul), "an id with NUL gave {nul:?}");
    let n = call(C, "count_after", store.count_after(&scope, None).await)?;
    ensure!(
        C,
        n == 5,
        "a rejected append left rows behind: {n} messages, expected 5"
    );

    // Ids are unique per scope, not globally.
    let other = SessionScope::new(format!("{ns}-flow"), "user", "session", "other-ctx");
    call(
        C,
        "append to another context",
        store.append(&other, &[msg(1, "m1")]).await,
    )?;
    Ok(())
}

/// `append_new` stores only ids the scope does not hold yet: a retried batch stores
/// nothing and fails nothing, a batch mixing old and new ids stores the new ones, and
/// the batch checks (`append`'s) still apply.
pub async fn idempotent_history<S: Storage>(store: &S) -> Checked {
    const C: &str = "idempotent_history";
    let scope = SessionScope::new(format!("{}-flow", namespace()), "user", "session", "");
    let batch = [msg(1, "m1"), msg(2, "m2")];
    let n = call(C, "append_new", store.append_new(&scope, &batch).await)?;
    ensure!(C, n == 2, "the first append_new stored {n} of 2");
    let n = call(
        C,
        "append_new again",
        store.append_new(&scope, &batch).await,
    )?;
    ensure!(C, n == 0, "a retried batch stored {n} messages again");
    let n = call(
        C,
        "append_new",
        store
            .append_new(&scope, &[msg(9, "m2"), msg(3, "m3")])
            .await,
    )?;
    ensure!(C, n == 1, "a batch with one new id stored {n}");
    let all = call(C, "after", store.after(&scope, None, 100).await)?;
    ensure!(
        C,
        ids(&all) == ["m1", "m2", "m3"] && all[1].timestamp_ms == 2,
        "history after retries: {:?}; a skipped message must keep its first timestamp",
        all.iter()
            .map(|m| (m.timestamp_ms, m.message.id()))
            .collect::<Vec<_>>()
    );
    let r = store.append_new(&scope, &[msg(4, "")]).await;
    ensure!(C, is_invalid(&r), "an empty id gave {r:?}");
    let r = store
        .append_new(&scope, &[msg(4, "m4"), msg(5, "m4")])
        .await;
    ensure!(C, is_invalid(&r), "one id twice in a batch gave {r:?}");
    Ok(())
}

/// `append_stamped_counting` stores as `append_stamped` does and counts the rows after
/// the cursor it is given (all of them without one) with the batch stored.
pub async fn counted_history<S: Storage>(store: &S) -> Checked {
    const C: &str = "counted_history";
    let scope = SessionScope::new(format!("{}-flow", namespace()), "user", "session", "");
    let human = |id: &str| Message::human(format!("message {id}")).with_id(id);
    let at = |ts: i64, id: &str| Cursor {
        timestamp_ms: ts,
        message_id: id.to_owned(),
    };
    let got = call(
        C,
        "append_stamped_counting",
        store
            .append_stamped_counting(&scope, &[human("b1"), human("a2")], 100, None)
            .await,
    )?;
    ensure!(
        C,
        got == (vec![at(100, "b1"), at(101, "a2")], 2),
        "the first batch gave {got:?}"
    );
    let got = call(
        C,
        "append_stamped_counting",
        store
            .append_stamped_counting(&scope, &[human("a2"), human("c3")], 0, Some(&at(100, "b1")))
            .await,
    )?;
    ensure!(
        C,
        got == (vec![at(103, "c3")], 2),
        "a batch with one stored id, counted after the first row, gave {got:?}"
    );
    let got = call(
        C,
        "append_stamped_counting",
        store
            .append_stamped_counting(&scope, &[human("c3")], 0, Some(&at(103, "c3")))
            .await,
    )?;
    ensure!(C, got == (Vec::new(), 0), "a retried batch gave {got:?}");
    let r = store
        .append_stamped_counting(&scope, &[human("")], 0, None)
        .await;
    ensure!(C, is_invalid(&r), "an empty id gave {r:?}");
    Ok(())
}

/// `append_stamped` stamps a batch after the newest stored row (or at the floor it is
/// given, when later), in list order, skips ids already stored and returns exactly the
/// positions it stored; it runs the batch checks of `append`.
pub async fn stamped_history<S: Storage>(store: &S) -> Checked {
    const C: &str = "stamped_history";
    let scope = SessionScope::new(format!("{}-flow", namespace()), "user", "session", "");
    let human = |id: &str| Message::human(format!("message {id}")).with_id(id);
    let at = |ts: i64, id: &str| Cursor {
        timestamp_ms: ts,
        message_id: id.to_owned(),
    };
    // An empty session starts at the floor; ids that sort backwards keep list order.
    let first = [human("z1"), human("a2")];
    let got = call(
        C,
        "append_stamped",
        store.append_stamped(&scope, &first, 100).await,
    )?;
    ensure!(
        C,
        got == [at(100, "z1"), at(101, "a2")],
        "the first batch was stored at {got:?}"
    );
    // A floor behind the newest row: stamped after the newest row instead.
    let retry = [human("a2"), human("m3")];
    let got = call(
        C,
        "append_stamped",
        store.append_stamped(&scope, &retry, 5).await,
    )?;
    ensure!(
        C,
        got == [at(103, "m3")],
        "a batch with one stored id gave {got:?} (the stored id is skipped, its slot unused)"
    );
    // A floor ahead of the newest row wins.
    let got = call(
        C,
        "append_stamped",
        store.append_stamped(&scope, &[human("m4")], 1_000).await,
    )?;
    ensure!(C, got == [at(1_000, "m4")], "a later floor gave {got:?}");
    let got = call(
        C,
        "append_stamped again",
        store.append_stamped(&scope, &[human("m4")], 1_000).await,
    )?;
    ensure!(C, got.is_empty(), "a retried batch stored {got:?}");
    let all = call(C, "after", store.after(&scope, None, 100).await)?;
    ensure!(
        C,
        ids(&all) == ["z1", "a2", "m3", "m4"] && all[0].message == first[0],
        "history: {:?}",
        all.iter()
            .map(|m| (m.timestamp_ms, m.message.id()))
            .collect::<Vec<_>>()
    );
    let r = store.append_stamped(&scope, &[human("")], 0).await;
    ensure!(C, is_invalid(&r), "an empty id gave {r:?}");
    let r = store
        .append_stamped(&scope, &[human("m9"), human("m9")], 0)
        .await;
    ensure!(C, is_invalid(&r), "one id twice in a batch gave {r:?}");
    let none = call(
        C,
        "append_stamped([])",
        store.append_stamped(&scope, &[], 0).await,
    )?;
    ensure!(C, none.is_empty(), "an empty batch gave {none:?}");

    // A batch larger than one statement holds: still one increasing run, in list order.
    let big: Vec<Message> = (0..1_001)
        .map(|i| human(&format!("big-{:04}", 1_000 - i)))
        .collect();
    let got = call(
        C,
        "append_stamped(1,001)",
        store.append_stamped(&scope, &big, 0).await,
    )?;
    ensure!(
        C,
        got.len() == big.len()
            && got
                .windows(2)
                .all(|w| w[1].timestamp_ms == w[0].timestamp_ms + 1)
            && got.first().is_some_and(|c| c.timestamp_ms == 1_001),
        "a 1,001-message batch was stored at {:?} .. {:?} ({} rows)",
        got.first(),
        got.last(),
        got.len()
    );
    let all = call(
        C,
        "after",
        store.after(&scope, Some(&at(1_000, "m4")), 2_000).await,
    )?;
    ensure!(
        C,
        all.iter()
            .map(|m| m.message.id())
            .eq(big.iter().map(Message::id)),
        "a large batch did not keep its list order"
    );
    Ok(())
}

/// Scope is a security boundary: a scope that differs in any one of its four fields
/// (including hostile-looking values) sees none of another's history or state, and its
/// writes and deletes leave the other untouched.
pub async fn scope_isolation<S: Storage>(store: &S) -> Checked {
    const C: &str = "scope_isolation";
    let ns = namespace();
    let flow = format!("{ns}-flow");
    let owner = SessionScope::new(flow.clone(), "alice", "s1", "");
    call(
        C,
        "append",
        store.append(&owner, &[msg(1, "a1"), msg(2, "a2")]).await,
    )?;
    let state = SessionMemoryState {
        summary: "- alice's secret project".into(),
        ..Default::default()
    };
    call(C, "save_state", store.save_state(&owner, &state, 0).await)?;

    let strangers = [
        SessionScope::new(format!("{ns}-other-flow"), "alice", "s1", ""),
        SessionScope::new(flow.clone(), "mallory", "s1", ""),
        SessionScope::new(flow.clone(), "alice", "s2", ""),
        SessionScope::new(flow.clone(), "alice", "s1", "ctx"),
        SessionScope::new(flow.clone(), "alice' OR '1'='1", "s1", ""),
        SessionScope::new(flow.clone(), "%", "%", "%"),
        SessionScope::new(flow.clone(), "", "s1", ""),
    ];
    for s in &strangers {
        let last = call(C, "last_n", store.last_n(s, 100).await)?;
        ensure!(C, last.is_empty(), "{s:?} read {:?} via last_n", ids(&last));
        let after = call(C, "after", store.after(s, None, 100).await)?;
        ensure!(
            C,
            after.is_empty(),
            "{s:?} read {:?} via after",
            ids(&after)
        );
        let n = call(C, "count_after", store.count_after(s, None).await)?;
        ensure!(C, n == 0, "{s:?} counted {n} messages of another scope");
        let st = call(C, "get_state", store.get_state(s).await)?;
        ensure!(C, st.is_none(), "{s:?} read another scope's state: {st:?}");
        // Updating "version 1" must not reach the owner's row.
        let hijack = SessionMemoryState {
            summary: "overwritten".into(),
            ..Default::default()
        };
        let out = call(C, "save_state", store.save_state(s, &hijack, 1).await)?;
        ensure!(
            C,
            out == SaveOutcome::Conflict,
            "{s:?} updated a row it does not own: {out:?}"
        );
        // Deletion is per (flow, user, session): a stranger differing only in context
        // shares the owner's session and may delete it, so it is left out here.
        if (&s.flow_id, &s.user_id, &s.session_id)
            != (&owner.flow_id, &owner.user_id, &owner.session_id)
        {
            let purged = call(
                C,
                "delete_session_states",
                store
                    .delete_session_states(&s.flow_id, &s.user_id, &s.session_id)
                    .await,
            )?;
            ensure!(
                C,
                purged == 0,
                "{s:?} deleted {purged} rows of another scope"
            );
        }
        // A stranger may use the same message ids in its own scope.
        call(C, "append", store.append(s, &[msg(9, "a1")]).await)?;
    }
    let mine = call(C, "last_n", store.last_n(&owner, 100).await)?;
    ensure!(
        C,
        ids(&mine) == ["a1", "a2"],
        "the owner's history changed: {:?}",
        ids(&mine)
    );
    let st = call(C, "get_state", store.get_state(&owner).await)?;
    ensure!(
        C,
        st.as_ref().map(|s| (s.version, s.summary.as_str()))
            == Some((1, "- alice's secret project")),
        "the owner's state changed: {st:?}"
    );

    // A NUL in a key is refused by every backend, on reads as on writes.
    let nul = SessionScope::new(flow.clone(), "alice\0", "s1", "");
    let r = store.last_n(&nul, 10).await;
    ensure!(C, is_invalid(&r), "last_n with a NUL in user_id gave {r:?}");
    let r = store.get_state(&nul).await;
    ensure!(
        C,
        is_invalid(&r),
        "get_state with a NUL in user_id gave {r:?}"
    );
    let r = store.get_summary("k\0").await;
    ensure!(
        C,
        is_invalid(&r),
        "get_summary with a NUL in the key gave {r:?}"
    );
    Ok(())
}

fn sample_state(n: u64) -> SessionMemoryState {
    let mut pinned = Map::new();
    pinned.insert("project_id".into(), json!(format!("PRJ-{n}")));
    pinned.insert(
        "cluster".into(),
        json!({"region": "EU", "nodes": [1, 2, n]}),
    );
    pinned.insert("customer".into(), Value::Null);
    SessionMemoryState {
        summary: format!("- fold {n}: project PRJ-{n} on the EU cluster — ünïcode"),
        pinned,
        covered_until: Some(Cursor {
            timestamp_ms: 1_700_000_000_000 + n as i64,
            message_id: format!("msg-{n}"),
        }),
        absorbed_count: 20 * n,
        summary_model: Some("gpt-test".into()),
        version: 0,
        created_at_ms: 0,
        updated_at_ms: 0,
    }
}

fn same_content(a: &SessionMemoryState, b: &SessionMemoryState) -> bool {
    a.summary == b.summary
        && a.pinned == b.pinned
        && a.covered_until == b.covered_until
        && a.absorbed_count == b.absorbed_count
        && a.summary_model == b.summary_model
}

/// Insert at version 0, compare-and-swap updates, conflicts that write nothing, the
/// version assigned by the store, timestamps kept by the store, and range checks.
pub async fn state_compare_and_swap<S: Storage>(store: &S) -> Checked {
    const C: &str = "state_compare_and_swap";
    let ns = namespace();
    let scope = SessionScope::new(format!("{ns}-flow"), "user", "session", "");
    let got = call(C, "get_state", store.get_state(&scope).await)?;
    ensure!(C, got.is_none(), "a fresh scope has state {got:?}");

    let one = sample_state(1);
    let out = call(C, "insert", store.save_state(&scope, &one, 0).await)?;
    ensure!(
        C,
        out == SaveOutcome::Saved { version: 1 },
        "insert gave {out:?}"
    );
    let read = call(C, "get_state", store.get_state(&scope).await)?
        .ok_or_else(|| fail(C, "state missing after insert"))?;
    ensure!(
        C,
        same_content(&read, &one),
        "state did not round-trip: wrote {one:?}, read {read:?}"
    );
    ensure!(
        C,
        read.version == 1,
        "version after insert is {}",
        read.version
    );
    ensure!(
        C,
        read.created_at_ms > 0 && read.updated_at_ms >= read.created_at_ms,
        "timestamps not set by the store: created {} updated {}",
        read.created_at_ms,
        read.updated_at_ms
    );

    let two = sample_state(2);
    let out = call(C, "second insert", store.save_state(&scope, &two, 0).await)?;
    ensure!(
        C,
        out == SaveOutcome::Conflict,
        "a second insert at version 0 gave {out:?}"
    );
    let out = call(C, "update", store.save_state(&scope, &two, 1).await)?;
    ensure!(
        C,
        out == SaveOutcome::Saved { version: 2 },
        "update from 1 gave {out:?}"
    );
    for stale in [0, 1, 3, 7] {
        let out = call(
            C,
            "stale update",
            store.save_state(&scope, &sample_state(9), stale).await,
        )?;
        ensure!(
            C,
            out == SaveOutcome::Conflict,
            "an update expecting version {stale} when the row is at 2 gave {out:?}"
        );
    }
    let read2 = call(C, "get_state", store.get_state(&scope).await)?
        .ok_or_else(|| fail(C, "state missing after update"))?;
    ensure!(
        C,
        same_content(&read2, &two),
        "a conflict overwrote the state: {read2:?}"
    );
    ensure!(C, read2.version == 2, "version is {}", read2.version);
    ensure!(
        C,
        read2.created_at_ms == read.created_at_ms,
        "an update changed created_at_ms from {} to {}",
        read.created_at_ms,
        read2.created_at_ms
    );

    // The stored version comes from expected_version, never from state.version.
    let mut liar = SessionMemoryState {
        covered_until: None,
        summary_model: None,
        pinned: Map::new(),
        ..sample_state(3)
    };
    liar.version = 99;
    let out = call(C, "update", store.save_state(&scope, &liar, 2).await)?;
    ensure!(
        C,
        out == SaveOutcome::Saved { version: 3 },
        "update from 2 gave {out:?}"
    );
    let read3 = call(C, "get_state", store.get_state(&scope).await)?
        .ok_or_else(|| fail(C, "state missing"))?;
    ensure!(
        C,
        read3.version == 3 && same_content(&read3, &liar),
        "read back {read3:?}"
    );

    // Updating a scope that was never inserted writes nothing.
    let ghost = SessionScope::new(format!("{ns}-flow"), "user", "ghost", "");
    let out = call(
        C,
        "update of a missing row",
        store.save_state(&ghost, &one, 4).await,
    )?;
    ensure!(
        C,
        out == SaveOutcome::Conflict,
        "updating a missing row gave {out:?}"
    );
    let got = call(C, "get_state", store.get_state(&ghost).await)?;
    ensure!(C, got.is_none(), "an update created a row: {got:?}");

    // Out-of-range input is a typed error, not a panic or a wrapped-around value.
    let r = store.save_state(&scope, &one, u64::MAX).await;
    ensure!(C, is_invalid(&r), "expected_version = u64::MAX gave {r:?}");
    let r = store.save_state(&scope, &one, i64::MAX as u64).await;
    ensure!(C, is_invalid(&r), "expected_version = i64::MAX gave {r:?}");
    let huge = SessionMemoryState {
        absorbed_count: u64::MAX,
        ..sample_state(4)
    };
    let r = store.save_state(&scope, &huge, 3).await;
    ensure!(C, is_invalid(&r), "absorbed_count = u64::MAX gave {r:?}");
    let nul = SessionMemoryState {
        summary: "a\0b".into(),
        ..sample_state(4)
    };
    let r = store.save_state(&scope, &nul, 3).await;
    ensure!(C, is_invalid(&r), "a summary with NUL gave {r:?}");
    Ok(())
}

/// `delete_session_states` removes every context of one `(flow, user, session)` and
/// nothing else; chat history is untouched; the scope can start again at version 0.
pub async fn purge<S: Storage>(store: &S) -> Checked {
    const C: &str = "purge";
    let ns = namespace();
    let flow = format!("{ns}-flow");
    let doomed = [
        SessionScope::new(flow.clone(), "u", "s", ""),
        SessionScope::new(flow.clone(), "u", "s", "sub"),
    ];
    let kept = [
        SessionScope::new(flow.clone(), "u", "s2", ""),
        SessionScope::new(flow.clone(), "u2", "s", ""),
        SessionScope::new(format!("{flow}-2"), "u", "s", ""),
    ];
    for s in doomed.iter().chain(&kept) {
        call(
            C,
            "save_state",
            store.save_state(s, &sample_state(1), 0).await,
        )?;
    }
    call(C, "append", store.append(&doomed[0], &[msg(1, "h1")]).await)?;

    let n = call(
        C,
        "delete_session_states",
        store.delete_session_states(&flow, "u", "s").await,
    )?;
    ensure!(
        C,
        n == 2,
        "deleting a session with two contexts removed {n} rows"
    );
    for s in &doomed {
        let st = call(C, "get_state", store.get_state(s).await)?;
        ensure!(C, st.is_none(), "{s:?} survived the purge: {st:?}");
    }
    for s in &kept {
        let st = call(C, "get_state", store.get_state(s).await)?;
        ensure!(
            C,
            st.is_some(),
            "{s:?} was deleted by another session's purge"
        );
    }
    let n = call(C, "count_after", store.count_after(&doomed[0], None).await)?;
    ensure!(
        C,
        n == 1,
        "purging state deleted chat history ({n} messages left of 1)"
    );
    // Deleting the session's history: every context of it, nothing of another session.
    call(C, "append", store.append(&doomed[1], &[msg(2, "h2")]).await)?;
    call(C, "append", store.append(&kept[0], &[msg(1, "h1")]).await)?;
    let gone = call(
        C,
        "delete_session_history",
        store.delete_session_history(&flow, "u", "s").await,
    )?;
    ensure!(
        C,
        gone == 2,
        "deleting the session's history removed {gone} of 2 messages"
    );
    for s in &doomed {
        let n = call(C, "count_after", store.count_after(s, None).await)?;
        ensure!(
            C,
            n == 0,
            "{s:?} kept {n} messages after its session was deleted"
        );
    }
    let n = call(C, "count_after", store.count_after(&kept[0], None).await)?;
    ensure!(
        C,
        n == 1,
        "another session lost its history ({n} of 1 left)"
    );
    // Summaries by key prefix: the thread's, not a longer thread id's.
    let doomed_key = format!("{ns}-summary:thread-1#");
    for key in [
        format!("{doomed_key}a"),
        format!("{doomed_key}b"),
        format!("{ns}-summary:thread-10#a"),
    ] {
        call(C, "put_summary", store.put_summary(&key, &json!("s")).await)?;
    }
    let gone = call(
        C,
        "delete_summaries",
        store.delete_summaries(&doomed_key).await,
    )?;
    ensure!(
        C,
        gone == 2,
        "delete_summaries({doomed_key:?}) removed {gone} of 2"
    );
    let other = call(
        C,
        "get_summary",
        store
            .get_summary(&format!("{ns}-summary:thread-10#a"))
            .await,
    )?;
    ensure!(
        C,
        other.is_some(),
        "delete_summaries removed a key it does not prefix"
    );
    let r = store.delete_summaries("").await;
    ensure!(
        C,
        is_invalid(&r),
        "delete_summaries(\"\") gave {r:?}, expected Invalid"
    );
    let again = call(
        C,
        "delete_session_states",
        store.delete_session_states(&flow, "u", "s").await,
    )?;
    ensure!(C, again == 0, "a second purge removed {again} rows");
    let out = call(
        C,
        "save_state",
        store.save_state(&doomed[0], &sample_state(2), 0).await,
    )?;
    ensure!(
        C,
        out == SaveOutcome::Saved { version: 1 },
        "re-insert after purge gave {out:?}"
    );
    Ok(())
}

fn step(parent: Option<u64>, node: &str, update: StateUpdate) -> CheckpointWrite {
    CheckpointWrite {
        parent,
        run_id: "run-1".into(),
        node: node.into(),
        update,
        created_at_ms: 1_700_000_000_000 + parent.map_or(0, |p| p as i64 + 1),
    }
}

/// Steps are stored as deltas and read back as full states: seq 0, 1, 2, ... per thread;
/// every step's state equals the add-messages reducer applied to the updates so far
/// (an in-place rewrite under the same id, a removal, a removal of everything, one id
/// upserted twice in one step, values); `latest` is the last of `history`; deleting
/// the thread empties it and it starts again at seq 0.
pub async fn checkpoints_append_only<S: Storage>(store: &S) -> Checked {
    const C: &str = "checkpoints_append_only";
    let ns = namespace();
    let thread = format!("{ns}-thread");
    let h1 = Message::human("hello").with_id("h1");
    let a1 = Message::ai("")
        .with_tool_calls(vec![ToolCall::new("c1", "ls", json!({"dir": "/"}))])
        .with_id("a1");
    let t1 = Message::tool("c1", "a b c").with_id("t1");
    let mut h1_edited = h1.clone();
    if let MessageBody::Human(h) = h1_edited.body_mut() {
        h.content = "hello (edited in place)".into();
    }
    let mut values = Map::new();
    values.insert("step".into(), json!(2));
    let updates = [
        ("input", StateUpdate::messages([h1.clone()])),
        ("model", StateUpdate::messages([a1.clone()])),
        (
            "tools",
            StateUpdate {
                messages: StateUpdate::messages([h1_edited, t1.clone(), t1.clone()]).messages,
                values,
            },
        ),
        (
            "remove",
            StateUpdate {
                messages: vec![MessageOp::Remove { id: "a1".into() }],
                ..Default::default()
            },
        ),
        (
            "wipe",
            StateUpdate {
                messages: vec![
                    MessageOp::RemoveAll,
                    MessageOp::Upsert {
                        message: a1.clone(),
                    },
                ],
                values: StateUpdate::value("step", json!(4)).values,
            },
        ),
        ("empty", StateUpdate::default()),
    ];
    let mut reference = AgentState::default();
    let mut expected = Vec::new();
    for (i, (node, update)) in updates.iter().enumerate() {
        let parent = i.checked_sub(1).map(|p| p as u64);
        let out = call(
            C,
            "put",
            store.put(&thread, step(parent, node, update.clone())).await,
        )?;
        ensure!(
            C,
            out == PutOutcome::Saved { seq: i as u64 },
            "put #{i} after {parent:?} gave {out:?}"
        );
        reference
            .apply(update.clone())
            .map_err(|e| fail(C, format!("the reference reducer refused step {i}: {e}")))?;
        expected.push(reference.clone());
    }
    let history = call(C, "history", store.history(&thread).await)?;
    ensure!(
        C,
        history.len() == updates.len(),
        "history has {} checkpoints, wrote {}",
        history.len(),
        updates.len()
    );
    for (i, (got, want)) in history.iter().zip(&expected).enumerate() {
        ensure!(
            C,
            got.seq == i as u64 && got.node == updates[i].0 && got.run_id == "run-1",
            "checkpoint {i} is seq {} node {:?} run {:?}",
            got.seq,
            got.node,
            got.run_id
        );
        ensure!(
            C,
            got.messages == *want.messages && got.values == want.values,
            "checkpoint {i} read back as {:?} {:?}, the reducer says {:?} {:?}",
            got.messages,
            got.values,
            want.messages,
            want.values
        );
        ensure!(
            C,
            got.created_at_ms == 1_700_000_000_000 + i as i64,
            "checkpoint {i} has created_at_ms {}",
            got.created_at_ms
        );
    }
    let latest = call(C, "latest", store.latest(&thread).await)?;
    ensure!(
        C,
        latest.as_ref() == history.last(),
        "latest is {latest:?}, history ends with {:?}",
        history.last()
    );
    let other = format!("{ns}-other");
    ensure!(
        C,
        call(C, "history", store.history(&other).await)?.is_empty(),
        "an unknown thread has history"
    );
    ensure!(
        C,
        call(C, "latest", store.latest(&other).await)?.is_none(),
        "an unknown thread has a latest checkpoint"
    );
    let gone = call(C, "delete_thread", store.delete_thread(&thread).await)?;
    ensure!(
        C,
        gone == updates.len() as u64,
        "delete_thread removed {gone} steps"
    );
    ensure!(
        C,
        call(C, "latest", store.latest(&thread).await)?.is_none()
            && call(C, "history", store.history(&thread).await)?.is_empty(),
        "a deleted thread still has checkpoints"
    );
    let out = call(
        C,
        "put",
        store
            .put(&thread, step(None, "input", StateUpdate::messages([h1])))
            .await,
    )?;
    ensure!(
        C,
        out == PutOutcome::Saved { seq: 0 },
        "a deleted thread restarted at {out:?}"
    );
    let restarted = call(C, "latest", store.latest(&thread).await)?;
    ensure!(
        C,
        restarted.as_ref().map(|c| c.messages.len()) == Some(1),
        "a restarted thread has {restarted:?}"
    );
    Ok(())
}

/// Bounded reads of the history: `history_page(before, limit)` is the newest `limit`
/// checkpoints of `history` below `before`, newest first, for every `before` (none, 0,
/// inside, past the head) and `limit` (0, 1, some, more than there are);
/// `checkpoint_at` returns exactly the checkpoint of `history` with that seq, and
/// `None` for a seq past the head or a thread with no steps. The steps replace, remove,
/// clear and set values, so a page that started from the wrong state shows.
pub async fn checkpoint_pages<S: Storage>(store: &S) -> Checked {
    const C: &str = "checkpoint_pages";
    let ns = namespace();
    let thread = format!("{ns}-thread");
    let m = |text: &str, id: &str| Message::human(text).with_id(id);
    let updates = [
        StateUpdate::messages([m("a", "a"), m("b", "b")]),
        StateUpdate {
            messages: StateUpdate::messages([m("B", "b"), m("c", "c")]).messages,
            values: StateUpdate::value("k", json!(1)).values,
        },
        StateUpdate {
            messages: vec![MessageOp::Remove { id: "a".into() }],
            ..Default::default()
        },
        StateUpdate::value("k", json!(2)),
        StateUpdate {
            messages: vec![
                MessageOp::RemoveAll,
                MessageOp::Upsert {
                    message: m("d", "d"),
                },
            ],
            ..Default::default()
        },
        StateUpdate::messages([m("e", "e"), m("D", "d")]),
        StateUpdate::default(),
    ];
    for (i, update) in updates.iter().enumerate() {
        let parent = i.checked_sub(1).map(|p| p as u64);
        let out = call(
            C,
            "put",
            store
                .put(&thread, step(parent, "step", update.clone()))
                .await,
        )?;
        ensure!(
            C,
            out == PutOutcome::Saved { seq: i as u64 },
            "put #{i} gave {out:?}"
        );
    }
    let history = call(C, "history", store.history(&thread).await)?;
    let n = updates.len() as u64;
    ensure!(
        C,
        history.len() == updates.len(),
        "history has {} checkpoints",
        history.len()
    );
    for before in [
        None,
        Some(0),
        Some(1),
        Some(3),
        Some(n - 1),
        Some(n),
        Some(n + 5),
    ] {
        for limit in [0, 1, 2, 3, updates.len(), 100] {
            let mut want: Vec<_> = history
                .iter()
                .filter(|c| before.is_none_or(|b| c.seq < b))
                .cloned()
                .collect();
            want.reverse();
            want.truncate(limit);
            let got = call(
                C,
                "history_page",
                store.history_page(&thread, before, limit).await,
            )?;
            ensure!(
                C,
                got == want,
                "history_page(before {before:?}, limit {limit}) gave seqs {:?} (values {:?}), want {:?}",
                got.iter().map(|c| c.seq).collect::<Vec<_>>(),
                got.iter().map(|c| &c.values).collect::<Vec<_>>(),
                want.iter().map(|c| c.seq).collect::<Vec<_>>()
            );
        }
    }
    for cp in &history {
        let got = call(
            C,
            "checkpoint_at",
            store.checkpoint_at(&thread, cp.seq).await,
        )?;
        ensure!(
            C,
            got.as_ref() == Some(cp),
            "checkpoint_at({}) gave {got:?}, history has {cp:?}",
            cp.seq
        );
    }
    let unknown = format!("{ns}-none");
    for (t, seq) in [(&thread, n), (&thread, u64::MAX), (&unknown, 0)] {
        let got = call(C, "checkpoint_at", store.checkpoint_at(t, seq).await)?;
        ensure!(C, got.is_none(), "checkpoint_at({t}, {seq}) gave {got:?}");
    }
    let empty = call(
        C,
        "history_page",
        store.history_page(&unknown, None, 10).await,
    )?;
    ensure!(
        C,
        empty.is_empty(),
        "an unknown thread has a page: {empty:?}"
    );
    Ok(())
}

/// The ids of each checkpoint's messages.
fn message_ids(cps: &[keel_core::store::Checkpoint]) -> Vec<Vec<String>> {
    cps.iter()
        .map(|c| c.messages.iter().map(|m| m.id().to_owned()).collect())
        .collect()
}

/// Time travel: `fork` starts a branch from any checkpoint (nested forks too), whose
/// first step's parent is that checkpoint and which becomes the head; the current
/// branch's history follows parents back to the thread's first checkpoint, while older
/// branches keep their states ([`checkpoint_at`](keel_core::store::Checkpointer::checkpoint_at),
/// [`branch_page`](keel_core::store::Checkpointer::branch_page), and every branch at once
/// with [`tree_page`](keel_core::store::Checkpointer::tree_page)). A fork is a
/// compare-and-swap on the head (of two concurrent forks exactly one is stored), a fork
/// from a checkpoint the thread lacks or with an invalid update is `Invalid`, a copy is
/// independent of its source, and deleting the thread deletes every branch.
pub async fn checkpoint_forks<S: Storage>(store: &S) -> Checked {
    const C: &str = "checkpoint_forks";
    let ns = namespace();
    let thread = format!("{ns}-thread");
    let m = |id: &str| Message::human(format!("text {id}")).with_id(id);
    let seqs = |cps: &[keel_core::store::Checkpoint]| cps.iter().map(|c| c.seq).collect::<Vec<_>>();
    // 0: empty, 1: [h1], 2: [h1 a1] k=1, 3: [h1 a1 h2 a2].
    let line = [
        StateUpdate::default(),
        StateUpdate::messages([m("h1")]),
        StateUpdate {
            messages: StateUpdate::messages([m("a1")]).messages,
            values: StateUpdate::value("k", json!(1)).values,
        },
        StateUpdate::messages([m("h2"), m("a2")]),
    ];
    for (i, update) in line.into_iter().enumerate() {
        let parent = i.checked_sub(1).map(|p| p as u64);
        call(
            C,
            "put",
            store.put(&thread, step(parent, "input", update)).await,
        )?;
    }
    let before_fork = call(C, "history", store.history(&thread).await)?;
    // Editing the first message: a fork from the empty first checkpoint.
    let out = call(
        C,
        "fork",
        store
            .fork(
                &thread,
                0,
                step(Some(3), "input", StateUpdate::messages([m("x")])),
            )
            .await,
    )?;
    ensure!(
        C,
        out == PutOutcome::Saved { seq: 4 },
        "the first fork gave {out:?}"
    );
    let head = call(C, "latest", store.latest(&thread).await)?;
    ensure!(
        C,
        head.as_ref().map(|h| (
            h.seq,
            h.parent,
            h.depth,
            message_ids(std::slice::from_ref(h))
        )) == Some((4, Some(0), 1, vec![vec!["x".to_owned()]])),
        "the fork's head is {head:?}"
    );
    ensure!(
        C,
        head.as_ref().is_some_and(|h| h.values.is_empty()),
        "the fork from an empty checkpoint has values {:?}",
        head.map(|h| h.values)
    );
    // A fork from the middle, then a step on the new branch.
    let edit = StateUpdate::messages([Message::ai("text a1 again").with_id("a1"), m("c")]);
    let out = call(
        C,
        "fork",
        store.fork(&thread, 2, step(Some(4), "update", edit)).await,
    )?;
    ensure!(
        C,
        out == PutOutcome::Saved { seq: 5 },
        "the second fork gave {out:?}"
    );
    let drop_h1 = StateUpdate {
        messages: vec![MessageOp::Remove { id: "h1".into() }],
        values: StateUpdate::value("k", json!(2)).values,
    };
    let out = call(
        C,
        "put",
        store.put(&thread, step(Some(5), "model", drop_h1)).await,
    )?;
    ensure!(
        C,
        out == PutOutcome::Saved { seq: 6 },
        "a step on the branch gave {out:?}"
    );
    let history = call(C, "history", store.history(&thread).await)?;
    ensure!(
        C,
        seqs(&history) == [0, 1, 2, 5, 6]
            && history.iter().map(|c| c.parent).collect::<Vec<_>>()
                == [None, Some(0), Some(1), Some(2), Some(5)]
            && history.iter().map(|c| c.depth).collect::<Vec<_>>() == [0, 1, 2, 3, 4],
        "the current branch is {:?} with parents {:?} and depths {:?}",
        seqs(&history),
        history.iter().map(|c| c.parent).collect::<Vec<_>>(),
        history.iter().map(|c| c.depth).collect::<Vec<_>>()
    );
    let texts: Vec<String> = history[3]
        .messages
        .iter()
        .map(|m| m.text().into_owned())
        .collect();
    ensure!(
        C,
        message_ids(&history[3..]) == [vec!["h1", "a1", "c"], vec!["a1", "c"]]
            && texts[1] == "text a1 again"
            && history[3].values.get("k") == Some(&json!(1))
            && history[4].values.get("k") == Some(&json!(2)),
        "the branch's states are {:?} with values {:?}",
        message_ids(&history[3..]),
        history[3..].iter().map(|c| &c.values).collect::<Vec<_>>()
    );
    // A nested fork from the second branch, clearing everything.
    let clear = StateUpdate {
        messages: vec![MessageOp::RemoveAll, MessageOp::Upsert { message: m("z") }],
        ..Default::default()
    };
    let out = call(
        C,
        "fork",
        store.fork(&thread, 5, step(Some(6), "update", clear)).await,
    )?;
    ensure!(
        C,
        out == PutOutcome::Saved { seq: 7 },
        "the nested fork gave {out:?}"
    );
    let page = call(
        C,
        "history_page",
        store.history_page(&thread, None, 10).await,
    )?;
    ensure!(
        C,
        seqs(&page) == [7, 5, 2, 1, 0] && message_ids(&page[..1]) == [vec!["z"]],
        "after the nested fork the current branch is {:?} ({:?})",
        seqs(&page),
        message_ids(&page)
    );
    let page = call(
        C,
        "history_page",
        store.history_page(&thread, Some(5), 2).await,
    )?;
    ensure!(
        C,
        seqs(&page) == [2, 1],
        "a page before 5 is {:?}",
        seqs(&page)
    );
    // Older branches are unchanged, and readable by checkpoint and by branch.
    for cp in &before_fork {
        let got = call(
            C,
            "checkpoint_at",
            store.checkpoint_at(&thread, cp.seq).await,
        )?;
        ensure!(
            C,
            got.as_ref() == Some(cp),
            "checkpoint {} changed after the forks: {got:?}, was {cp:?}",
            cp.seq
        );
    }
    for (tip, before, want) in [
        (Some(3), None, vec![3, 2, 1, 0]),
        (Some(3), Some(2), vec![1, 0]),
        (Some(6), None, vec![6, 5, 2, 1, 0]),
        (Some(4), None, vec![4, 0]),
        (None, None, vec![7, 5, 2, 1, 0]),
        (Some(99), None, vec![]),
    ] {
        let got = call(
            C,
            "branch_page",
            store.branch_page(&thread, tip, before, 10).await,
        )?;
        ensure!(
            C,
            seqs(&got) == want,
            "branch_page({tip:?}, before {before:?}) is {:?}, want {want:?}",
            seqs(&got)
        );
    }
    // Every branch together, newest first, each checkpoint with its own branch's state.
    for (before, limit, want) in [
        (None, 10, vec![7, 6, 5, 4, 3, 2, 1, 0]),
        (None, 3, vec![7, 6, 5]),
        (Some(6), 3, vec![5, 4, 3]),
        (Some(4), 10, vec![3, 2, 1, 0]),
        (Some(0), 10, vec![]),
        (None, 0, vec![]),
    ] {
        let got = call(
            C,
            "tree_page",
            store.tree_page(&thread, before, limit).await,
        )?;
        ensure!(
            C,
            seqs(&got) == want,
            "tree_page(before {before:?}, limit {limit}) is {:?}, want {want:?}",
            seqs(&got)
        );
        for cp in &got {
            let one = call(
                C,
                "checkpoint_at",
                store.checkpoint_at(&thread, cp.seq).await,
            )?;
            ensure!(
                C,
                one.as_ref() == Some(cp),
                "tree_page's checkpoint {} is {cp:?}, checkpoint_at says {one:?}",
                cp.seq
            );
        }
    }
    let six = call(C, "checkpoint_at", store.checkpoint_at(&thread, 6).await)?;
    ensure!(
        C,
        six.as_ref().map(|c| message_ids(std::slice::from_ref(c)))
            == Some(vec![vec!["a1".to_owned(), "c".to_owned()]]),
        "checkpoint 6 is {six:?}"
    );
    // Compare-and-swap and validation: nothing is written.
    for (parent, from) in [(Some(6), 1), (Some(3), 2), (None, 1)] {
        let out = call(
            C,
            "fork",
            store
                .fork(
                    &thread,
                    from,
                    step(parent, "input", StateUpdate::messages([m("lost")])),
                )
                .await,
        )?;
        ensure!(
            C,
            out == PutOutcome::Conflict { head: Some(7) },
            "a fork after a stale head {parent:?} gave {out:?}"
        );
    }
    let unknown = store
        .fork(
            &thread,
            99,
            step(Some(7), "input", StateUpdate::messages([m("lost")])),
        )
        .await;
    ensure!(
        C,
        is_invalid(&unknown),
        "a fork from checkpoint 99 gave {unknown:?}"
    );
    let bad = StateUpdate {
        messages: vec![MessageOp::Remove { id: "x".into() }],
        ..Default::default()
    };
    let r = store.fork(&thread, 3, step(Some(7), "input", bad)).await;
    ensure!(
        C,
        is_invalid(&r),
        "a fork removing a message its base lacks gave {r:?}"
    );
    // Two forks from the same checkpoint after the same head: exactly one is stored.
    let (a, b) = tokio::join!(
        store.fork(
            &thread,
            1,
            step(Some(7), "input", StateUpdate::messages([m("p")]))
        ),
        store.fork(
            &thread,
            1,
            step(Some(7), "input", StateUpdate::messages([m("q")]))
        ),
    );
    let (a, b) = (call(C, "fork", a)?, call(C, "fork", b)?);
    let saved = [a, b]
        .iter()
        .filter(|o| **o == PutOutcome::Saved { seq: 8 })
        .count();
    ensure!(
        C,
        saved == 1 && [a, b].contains(&PutOutcome::Conflict { head: Some(8) }),
        "two forks after one head gave {a:?} and {b:?}"
    );
    let page = call(
        C,
        "history_page",
        store.history_page(&thread, None, 10).await,
    )?;
    ensure!(
        C,
        seqs(&page) == [8, 1, 0],
        "after the race the branch is {:?}",
        seqs(&page)
    );
    // A copy holds every branch and is independent of its source.
    let copy = format!("{ns}-copy");
    let copied = call(C, "copy_thread", store.copy_thread(&thread, &copy).await)?;
    ensure!(C, copied == 9, "copy_thread copied {copied} steps, want 9");
    let (src, dst) = (
        call(C, "latest", store.latest(&thread).await)?,
        call(C, "latest", store.latest(&copy).await)?,
    );
    ensure!(
        C,
        src == dst && src.is_some(),
        "the copy's head {dst:?} is not {src:?}"
    );
    let three = call(C, "checkpoint_at", store.checkpoint_at(&copy, 3).await)?;
    ensure!(
        C,
        three.as_ref() == before_fork.get(3),
        "the copy's checkpoint 3 is {three:?}"
    );
    call(
        C,
        "fork",
        store
            .fork(
                &copy,
                2,
                step(Some(8), "input", StateUpdate::messages([m("y")])),
            )
            .await,
    )?;
    let src_after = call(C, "latest", store.latest(&thread).await)?;
    ensure!(
        C,
        src_after == src,
        "writing the copy changed its source: {src_after:?}"
    );
    let again = store.copy_thread(&thread, &copy).await;
    ensure!(
        C,
        is_invalid(&again),
        "copying onto a thread with checkpoints gave {again:?}"
    );
    // Deleting a thread deletes every branch.
    let deleted = call(C, "delete_thread", store.delete_thread(&thread).await)?;
    ensure!(
        C,
        deleted == 9,
        "delete_thread deleted {deleted} steps, want 9"
    );
    for seq in [3, 6, 8] {
        let got = call(C, "checkpoint_at", store.checkpoint_at(&thread, seq).await)?;
        ensure!(
            C,
            got.is_none(),
            "checkpoint {seq} survived the deletion: {got:?}"
        );
    }
    let copy_left = call(C, "latest", store.latest(&copy).await)?;
    ensure!(
        C,
        copy_left.is_some_and(|c| c.seq == 9),
        "deleting the source touched the copy"
    );
    call(C, "delete_thread", store.delete_thread(&copy).await)?;
    Ok(())
}

/// `put` is a compare-and-swap on the head: a stale parent (or `None` on a thread that
/// has steps) is a conflict naming the head and writes nothing; an invalid step (an
/// empty id, removing an unknown id) is `Invalid` and writes nothing either.
pub async fn checkpoint_compare_and_swap<S: Storage>(store: &S) -> Checked {
    const C: &str = "checkpoint_compare_and_swap";
    let thread = format!("{}-thread", namespace());
    let first = StateUpdate::messages([Message::human("a").with_id("a")]);
    let out = call(
        C,
        "put",
        store
            .put(&thread, step(Some(0), "input", first.clone()))
            .await,
    )?;
    ensure!(
        C,
        out == PutOutcome::Conflict { head: None },
        "a parent on an empty thread gave {out:?}"
    );
    call(
        C,
        "put",
        store.put(&thread, step(None, "input", first.clone())).await,
    )?;
    call(
        C,
        "put",
        store
            .put(
                &thread,
                step(
                    Some(0),
                    "model",
                    StateUpdate::messages([Message::ai("b").with_id("b")]),
                ),
            )
            .await,
    )?;
    for parent in [None, Some(0), Some(2), Some(u64::from(u32::MAX))] {
        let lost = StateUpdate::messages([Message::ai("lost").with_id("lost")]);
        let out = call(
            C,
            "put",
            store.put(&thread, step(parent, "model", lost)).await,
        )?;
        ensure!(
            C,
            out == PutOutcome::Conflict { head: Some(1) },
            "a write after {parent:?} when the head is 1 gave {out:?}"
        );
    }
    let bad = [
        StateUpdate::messages([Message::ai("x").with_id("")]),
        StateUpdate {
            messages: vec![
                MessageOp::Upsert {
                    message: Message::ai("x").with_id("x"),
                },
                MessageOp::Remove { id: "nope".into() },
            ],
            ..Default::default()
        },
    ];
    for update in bad {
        let r = store
            .put(&thread, step(Some(1), "model", update.clone()))
            .await;
        ensure!(C, is_invalid(&r), "an invalid step {update:?} gave {r:?}");
    }
    let history = call(C, "history", store.history(&thread).await)?;
    let ids: Vec<Vec<&str>> = history
        .iter()
        .map(|c| c.messages.iter().map(Message::id).collect())
        .collect();
    ensure!(
        C,
        ids == [vec!["a"], vec!["a", "b"]],
        "refused writes changed the thread: {ids:?}"
    );
    Ok(())
}

/// `tasks` writers append to one thread at once, each reading the head and retrying on
/// conflict until it wins once: every step is stored once, seqs are 0..tasks with no
/// gap, and the final state holds every writer's message exactly once.
pub async fn concurrent_checkpoints<S: Storage + 'static>(store: Arc<S>, tasks: usize) -> Checked {
    const C: &str = "concurrent_checkpoints";
    let thread = format!("{}-thread", namespace());
    let max_attempts = tasks.saturating_mul(4).max(16);
    let start = Arc::new(tokio::sync::Barrier::new(tasks));
    let mut handles = Vec::with_capacity(tasks);
    for writer in 0..tasks {
        let (store, thread, start) = (store.clone(), thread.clone(), start.clone());
        handles.push(tokio::spawn(async move {
            let mut conflicts = 0usize;
            for round in 0..max_attempts {
                let latest = store.latest(&thread).await;
                // In the first round every writer reads before any writes, so all of them
                // hold the empty thread and exactly one may win it (the barrier comes
                // before any early return so that a failing writer cannot strand the rest).
                if round == 0 {
                    start.wait().await;
                }
                let head = call(C, "latest", latest)?.map(|c| c.seq);
                let update = StateUpdate::messages([
                    Message::human(format!("from {writer}")).with_id(format!("w{writer}"))
                ]);
                match call(
                    C,
                    "put",
                    store.put(&thread, step(head, "input", update)).await,
                )? {
                    PutOutcome::Saved { .. } => return Ok(conflicts),
                    PutOutcome::Conflict { .. } => conflicts += 1,
                }
                tokio::task::yield_now().await;
            }
            Err(fail(
                C,
                format!("writer {writer} lost {max_attempts} races in a row"),
            ))
        }));
    }
    let mut conflicts = 0;
    for h in handles {
        conflicts += h
            .await
            .map_err(|e| fail(C, format!("a writer task failed: {e}")))??;
    }
    ensure!(
        C,
        tasks < 2 || conflicts > 0,
        "{tasks} writers never collided, so the race was not exercised"
    );
    let history = call(C, "history", store.history(&thread).await)?;
    let seqs: Vec<u64> = history.iter().map(|c| c.seq).collect();
    ensure!(
        C,
        seqs == (0..tasks as u64).collect::<Vec<_>>(),
        "seqs after the race: {seqs:?}"
    );
    let last = history
        .last()
        .map(|c| c.messages.clone())
        .unwrap_or_default();
    let mut ids: Vec<&str> = last.iter().map(Message::id).collect();
    ids.sort_unstable();
    let mut want: Vec<String> = (0..tasks).map(|w| format!("w{w}")).collect();
    want.sort_unstable();
    ensure!(
        C,
        ids == want.iter().map(String::as_str).collect::<Vec<_>>(),
        "the final state holds {ids:?}, expected each writer once"
    );
    Ok(())
}

/// The summary cache: missing keys, put, replace, arbitrary JSON values.
pub async fn summary_cache<S: Storage>(store: &S) -> Checked {
    const C: &str = "summary_cache";
    let key = format!("{}-summary/ключ", namespace());
    let got = call(C, "get_summary", store.get_summary(&key).await)?;
    ensure!(C, got.is_none(), "a fresh key has {got:?}");
    let values = [
        json!({"summary": "- PRJ-123 on EU", "tokens": 42, "nested": {"a": [1, 2.5, null]}}),
        json!("a bare string with \u{0} inside"),
        json!(7),
    ];
    for v in &values {
        call(C, "put_summary", store.put_summary(&key, v).await)?;
        let got = call(C, "get_summary", store.get_summary(&key).await)?;
        ensure!(C, got.as_ref() == Some(v), "put {v}, read {got:?}");
    }
    summary_leases(store).await
}

/// Summary leases: one holder at a time, renewed by the holder, taken over once
/// expired, given back by release, and dropped with the key's summaries.
pub async fn summary_leases<S: Storage>(store: &S) -> Checked {
    const C: &str = "summary_leases";
    let thread = format!("{}-lease", namespace());
    let key = format!("{thread}#recipe");
    let long = std::time::Duration::from_secs(60);
    let took = |r| call(C, "try_lease", r);
    ensure!(
        C,
        took(store.try_lease(&key, "a", long).await)?,
        "a free key was refused"
    );
    ensure!(
        C,
        !took(store.try_lease(&key, "b", long).await)?,
        "b took a's live lease"
    );
    ensure!(
        C,
        took(store.try_lease(&key, "a", long).await)?,
        "a could not renew its lease"
    );
    call(C, "release_lease", store.release_lease(&key, "b").await)?;
    ensure!(
        C,
        !took(store.try_lease(&key, "b", long).await)?,
        "b released a's lease"
    );
    call(C, "release_lease", store.release_lease(&key, "a").await)?;
    ensure!(
        C,
        took(store.try_lease(&key, "b", long).await)?,
        "a released lease stayed taken"
    );
    // An expired lease is taken over.
    let other = format!("{thread}#other");
    let short = std::time::Duration::from_millis(1);
    ensure!(
        C,
        took(store.try_lease(&other, "a", short).await)?,
        "a free key was refused"
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    ensure!(
        C,
        took(store.try_lease(&other, "b", long).await)?,
        "an expired lease was kept"
    );
    // Deleting the thread's summaries frees its leases.
    call(
        C,
        "delete_summaries",
        store.delete_summaries(&format!("{thread}#")).await,
    )?;
    ensure!(
        C,
        took(store.try_lease(&key, "c", long).await)?,
        "a deleted thread kept its lease"
    );
    Ok(())
}

/// Re-running the migrations is a no-op: data written before is still there and the
/// store still works.
pub async fn migrations_rerun<S: Storage>(store: &S) -> Checked {
    const C: &str = "migrations_rerun";
    let ns = namespace();
    let scope = SessionScope::new(format!("{ns}-flow"), "u", "s", "");
    call(
        C,
        "save_state",
        store.save_state(&scope, &sample_state(1), 0).await,
    )?;
    call(C, "append", store.append(&scope, &[msg(1, "x")]).await)?;
    call(C, "migrate", store.migrate().await)?;
    call(C, "migrate again", store.migrate().await)?;
    let st = call(C, "get_state", store.get_state(&scope).await)?;
    ensure!(
        C,
        st.map(|s| s.version) == Some(1),
        "state lost by re-running migrations"
    );
    let n = call(C, "count_after", store.count_after(&scope, None).await)?;
    ensure!(
        C,
        n == 1,
        "history lost by re-running migrations ({n} messages)"
    );
    let out = call(
        C,
        "save_state",
        store.save_state(&scope, &sample_state(2), 1).await,
    )?;
    ensure!(
        C,
        out == SaveOutcome::Saved { version: 2 },
        "save after migrate gave {out:?}"
    );
    Ok(())
}

/// What one task of [`concurrent_cas`] saw on one attempt.
struct Attempt {
    expected: u64,
    outcome: SaveOutcome,
}

/// `tasks` tasks each load the state of one scope and save it with compare-and-swap,
/// retrying until they win once. Versions rise by exactly one per successful save, each
/// version has exactly one winner, every loser gets [`SaveOutcome::Conflict`] (never an
/// error), and every load sees a whole state (no torn writes).
pub async fn concurrent_cas<S: Storage + 'static>(store: Arc<S>, tasks: usize) -> Checked {
    const C: &str = "concurrent_cas";
    let ns = namespace();
    let scope = SessionScope::new(format!("{ns}-flow"), "u", "contended", "");
    let max_attempts = tasks.saturating_mul(4).max(16);
    let mut handles = Vec::with_capacity(tasks);
    // In the first round every writer loads before any writer saves, so all of them
    // hold version 0 and exactly one may win it, whatever the scheduler does.
    let loaded = Arc::new(tokio::sync::Barrier::new(tasks));
    for writer in 0..tasks {
        let store = Arc::clone(&store);
        let scope = scope.clone();
        let loaded = Arc::clone(&loaded);
        handles.push(tokio::spawn(async move {
            let mut attempts = Vec::new();
            for round in 0..max_attempts {
                let loaded_state = store.get_state(&scope).await;
                // A fold makes a model call between load and save; later rounds yield
                // there so that the remaining writers keep colliding. (The barrier comes
                // before any early return so that a failing writer cannot strand the rest.)
                if round == 0 {
                    loaded.wait().await;
                } else {
                    tokio::task::yield_now().await;
                }
                let current = call(C, "get_state", loaded_state)?.unwrap_or_default();
                let v = current.version;
                ensure!(
                    C,
                    current.absorbed_count == v && (v == 0 || current.summary == format!("v{v}")),
                    "a load saw a torn state: version {v}, absorbed {}, summary {:?}",
                    current.absorbed_count,
                    current.summary
                );
                let mut next = current.clone();
                next.summary = format!("v{}", v + 1);
                next.absorbed_count = v + 1;
                next.pinned.insert("writer".into(), json!(writer));
                let outcome = call(C, "save_state", store.save_state(&scope, &next, v).await)?;
                let won = outcome != SaveOutcome::Conflict;
                attempts.push(Attempt {
                    expected: v,
                    outcome,
                });
                if won {
                    return Ok(attempts);
                }
            }
            Err(fail(
                C,
                format!("writer {writer} lost {max_attempts} races in a row"),
            ))
        }));
    }
    let mut by_version: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for h in handles {
        let attempts = h
            .await
            .map_err(|e| fail(C, format!("a writer task failed: {e}")))??;
        for a in attempts {
            let entry = by_version.entry(a.expected).or_default();
            match a.outcome {
                SaveOutcome::Saved { version } => {
                    ensure!(
                        C,
                        version == a.expected + 1,
                        "a save expecting {} stored version {version}",
                        a.expected
                    );
                    entry.0 += 1;
                }
                SaveOutcome::Conflict => entry.1 += 1,
            }
        }
    }
    let conflicts: usize = by_version.values().map(|(_, lost)| lost).sum();
    ensure!(
        C,
        tasks < 2 || conflicts > 0,
        "{tasks} writers never collided, so the race was not exercised"
    );
    for v in 0..tasks as u64 {
        let (winners, _) = by_version.get(&v).copied().unwrap_or_default();
        ensure!(
            C,
            winners == 1,
            "{winners} saves won from version {v}, expected exactly 1"
        );
    }
    ensure!(
        C,
        by_version.keys().all(|v| *v < tasks as u64),
        "someone saw a version beyond {tasks}: {:?}",
        by_version.keys().collect::<Vec<_>>()
    );
    let last = call(C, "get_state", store.get_state(&scope).await)?
        .ok_or_else(|| fail(C, "no state after the race"))?;
    ensure!(
        C,
        last.version == tasks as u64 && last.absorbed_count == tasks as u64,
        "final state has version {} absorbed {}, expected {tasks}",
        last.version,
        last.absorbed_count
    );
    Ok(())
}

/// Runs the recall-index checks: [`recall_index`], [`recall_ranking`],
/// [`recall_context`] and [`concurrent_recall_writers`] with 16 tasks.
pub async fn run_recall<S: keel_core::recall::RecallIndex + 'static>(store: Arc<S>) -> Checked {
    recall_index(&*store).await?;
    recall_ranking(&*store).await?;
    recall_context(&*store).await?;
    concurrent_recall_writers(store, 16).await
}

fn recall_doc(id: &str, seq: u64, text: &str) -> keel_core::recall::RecallDocument {
    keel_core::recall::RecallDocument::new(id, seq, "user", text)
}

/// Indexing skips ids already indexed, search is scoped (owner and thread), CJK and
/// accented text is found by CJK and accented queries, bad documents are refused, and
/// deleting a session deletes the index of every one of its contexts and nothing else.
pub async fn recall_index<S: keel_core::recall::RecallIndex>(store: &S) -> Checked {
    use keel_core::recall::query_terms;
    const C: &str = "recall_index";
    let ns = namespace();
    let scope = SessionScope::new(format!("{ns}-f"), "ada", "s1", "");
    let context = SessionScope::new(format!("{ns}-f"), "ada", "s1", "ctx");
    let other_user = SessionScope::new(format!("{ns}-f"), "bob", "s1", "");
    let other_thread = SessionScope::new(format!("{ns}-f"), "ada", "s2", "");
    let docs = [
        recall_doc(
            "m1",
            0,
            "We're going with Vendorix for the billing backups.",
        ),
        recall_doc("m2", 1, "这个项目的负责人是王芳，有问题先找他。"),
        recall_doc(
            "m3",
            2,
            "Die Kundendaten dürfen das Rechenzentrum in Zürich nicht verlassen.",
        ),
        recall_doc("m4", 3, "lunch at noon"),
    ];
    let n = call(
        C,
        "index_documents",
        store.index_documents(&scope, &docs).await,
    )?;
    ensure!(C, n == 4, "indexed {n} of 4 new documents");
    let again = call(
        C,
        "index_documents",
        store.index_documents(&scope, &docs).await,
    )?;
    ensure!(C, again == 0, "indexing the same ids again indexed {again}");
    call(
        C,
        "index_documents",
        store.index_documents(&context, &docs[..1]).await,
    )?;
    call(
        C,
        "index_documents",
        store.index_documents(&other_user, &docs[..1]).await,
    )?;
    call(
        C,
        "index_documents",
        store.index_documents(&other_thread, &docs[..1]).await,
    )?;
    let top =
        |hits: &[keel_core::recall::RecallHit]| hits.first().map(|h| h.document.message_id.clone());
    for (q, want) in [
        ("Which vendor takes the billing backups?", "m1"),
        ("负责人是谁？", "m2"),
        ("Wo müssen die Kundendaten bleiben?", "m3"),
    ] {
        let hits = call(C, "search", store.search(&scope, &query_terms(q), 5).await)?;
        ensure!(
            C,
            top(&hits).as_deref() == Some(want),
            "{q:?} found {:?}, not {want}",
            top(&hits)
        );
        let h = &hits[0];
        ensure!(
            C,
            h.document
                == docs
                    .iter()
                    .find(|d| d.message_id == want)
                    .cloned()
                    .unwrap_or_else(|| recall_doc("", 0, "")),
            "the hit's document did not round-trip: {:?}",
            h.document
        );
        ensure!(
            C,
            h.coverage > 0.0 && h.coverage <= 1.0 && h.score > 0.0,
            "score {} coverage {}",
            h.score,
            h.coverage
        );
    }
    let none = call(
        C,
        "search",
        store
            .search(&scope, &query_terms("kubernetes ingress"), 5)
            .await,
    )?;
    ensure!(C, none.is_empty(), "an unrelated query found {none:?}");
    let empty = call(C, "search", store.search(&scope, &[], 5).await)?;
    ensure!(C, empty.is_empty(), "an empty query found {empty:?}");
    let stranger = SessionScope::new(format!("{ns}-f"), "eve", "s1", "");
    let leaked = call(
        C,
        "search",
        store
            .search(&stranger, &query_terms("billing backups"), 5)
            .await,
    )?;
    ensure!(
        C,
        leaked.is_empty(),
        "another owner's search found {leaked:?}"
    );
    ensure!(
        C,
        is_invalid(
            &store
                .index_documents(&scope, &[recall_doc("", 9, "x")])
                .await
        ),
        "an empty message id was accepted"
    );
    ensure!(
        C,
        is_invalid(
            &store
                .index_documents(&scope, &[recall_doc("nul", 9, "a\0b")])
                .await
        ),
        "a NUL character was accepted"
    );
    let gone = call(
        C,
        "delete_session_index",
        store
            .delete_session_index(&scope.flow_id, "ada", "s1")
            .await,
    )?;
    ensure!(
        C,
        gone == 5,
        "deleting the session removed {gone} documents, not 5 (4 + 1 in another context)"
    );
    for s in [&scope, &context] {
        let left = call(C, "indexed_count", store.indexed_count(s).await)?;
        ensure!(
            C,
            left == 0,
            "{left} documents left in {s:?} after deletion"
        );
        let found = call(
            C,
            "search",
            store.search(s, &query_terms("billing backups"), 5).await,
        )?;
        ensure!(
            C,
            found.is_empty(),
            "a deleted session's search found {found:?}"
        );
    }
    for s in [&other_user, &other_thread] {
        let left = call(C, "indexed_count", store.indexed_count(s).await)?;
        ensure!(C, left == 1, "deleting one session took {s:?}'s document");
    }
    let again = call(
        C,
        "delete_session_index",
        store
            .delete_session_index(&scope.flow_id, "ada", "s1")
            .await,
    )?;
    ensure!(C, again == 0, "deleting again removed {again}");
    Ok(())
}

/// The ranking every backend agrees on: BM25 over the scope, newest first on ties.
pub async fn recall_ranking<S: keel_core::recall::RecallIndex>(store: &S) -> Checked {
    use keel_core::recall::query_terms;
    const C: &str = "recall_ranking";
    let scope = SessionScope::new(format!("{}-f", namespace()), "u", "t", "");
    let docs = [
        recall_doc("a", 0, "the primary host is db-1.acme.net"),
        recall_doc("b", 1, "status page is green"),
        recall_doc("c", 2, "correction: the primary host is db-7.acme.net now"),
        recall_doc("d", 3, "host host host"),
        recall_doc("e", 4, "the primary database is in Frankfurt"),
    ];
    call(
        C,
        "index_documents",
        store.index_documents(&scope, &docs).await,
    )?;
    // The reference: the shared scorer over every document of the scope.
    let query = query_terms("What is the current primary host?");
    let all: Vec<_> = docs.iter().map(|d| (d.clone(), d.terms())).collect();
    let mut df = std::collections::HashMap::new();
    for q in &query {
        let n = all
            .iter()
            .filter(|(_, t)| t.own.contains(q) || t.context.contains(q))
            .count() as u64;
        if n > 0 {
            df.insert(q.clone(), n);
        }
    }
    let stats = keel_core::recall::CorpusStats {
        documents: all.len() as u64,
        total_terms: all.iter().map(|(_, t)| t.weighted_len()).sum(),
    };
    let want = keel_core::recall::rank(&query, all, &df, stats, 10);
    let hits = call(C, "search", store.search(&scope, &query, 10).await)?;
    let order: Vec<&str> = hits
        .iter()
        .map(|h| h.document.message_id.as_str())
        .collect();
    let want_order: Vec<&str> = want
        .iter()
        .map(|h| h.document.message_id.as_str())
        .collect();
    ensure!(
        C,
        order == want_order && order.len() == 4,
        "ranked {order:?}, the reference ranks {want_order:?}"
    );
    for (h, w) in hits.iter().zip(&want) {
        ensure!(
            C,
            (h.score - w.score).abs() < 1e-9 && (h.coverage - w.coverage).abs() < 1e-9,
            "{} scored {} / {}, the reference {} / {}",
            h.document.message_id,
            h.score,
            h.coverage,
            w.score,
            w.coverage
        );
    }
    let limited = call(
        C,
        "search",
        store.search(&scope, &query_terms("primary host"), 2).await,
    )?;
    ensure!(C, limited.len() == 2, "limit 2 returned {}", limited.len());
    Ok(())
}

/// A document's time and context round-trip; a reply is found by the words of the
/// question before it (its context), ranked as the shared scorer ranks it; and
/// `following` gives the next document after each position, within the scope only.
pub async fn recall_context<S: keel_core::recall::RecallIndex>(store: &S) -> Checked {
    use keel_core::recall::query_terms;
    const C: &str = "recall_context";
    let ns = namespace();
    let scope = SessionScope::new(format!("{ns}-f"), "u", "t", "");
    let other = SessionScope::new(format!("{ns}-f"), "u2", "t", "");
    let mut question = recall_doc("q", 3, "Which port does the gateway listen on?");
    question.time = Some("2 May 2026, 9:14".to_owned());
    let mut answer = recall_doc("a", 5, "8443, behind the load balancer.");
    answer.role = "assistant".to_owned();
    answer.context = question.text.clone();
    let later = recall_doc("z", 9, "thanks");
    call(
        C,
        "index_documents",
        store
            .index_documents(&scope, &[question.clone(), answer.clone(), later.clone()])
            .await,
    )?;
    call(
        C,
        "index_documents",
        store
            .index_documents(&other, &[recall_doc("x", 4, "someone else's reply")])
            .await,
    )?;
    let hits = call(
        C,
        "search",
        store
            .search(&scope, &query_terms("gateway port number"), 5)
            .await,
    )?;
    let found: Vec<&str> = hits
        .iter()
        .map(|h| h.document.message_id.as_str())
        .collect();
    ensure!(
        C,
        found.contains(&"q") && found.contains(&"a"),
        "the question and its reply (by its context) should both be found, got {found:?}"
    );
    for h in &hits {
        let want = if h.document.message_id == "q" {
            &question
        } else {
            &answer
        };
        ensure!(
            C,
            &h.document == want,
            "the document did not round-trip: {:?}",
            h.document
        );
    }
    let next = call(C, "following", store.following(&scope, &[3, 5, 9, 4]).await)?;
    let mut ids: Vec<&str> = next.iter().map(|d| d.message_id.as_str()).collect();
    ids.sort_unstable();
    ensure!(
        C,
        ids == ["a", "z"],
        "following 3, 5, 9 and 4 should give a (after 3 and 4) and z (after 5), got {ids:?}"
    );
    let gone = call(
        C,
        "delete_session_index",
        store.delete_session_index(&scope.flow_id, "u", "t").await,
    )?;
    ensure!(C, gone == 3, "deleting removed {gone} documents, not 3");
    let after = call(C, "following", store.following(&scope, &[0]).await)?;
    ensure!(
        C,
        after.is_empty(),
        "a deleted scope still follows: {after:?}"
    );
    call(
        C,
        "delete_session_index",
        store.delete_session_index(&other.flow_id, "u2", "t").await,
    )?;
    Ok(())
}

/// `tasks` writers index overlapping batches into one scope and their own batches into
/// their own scopes at the same time: every document is indexed once, none is lost,
/// and no scope sees another's.
pub async fn concurrent_recall_writers<S: keel_core::recall::RecallIndex + 'static>(
    store: Arc<S>,
    tasks: usize,
) -> Checked {
    use keel_core::recall::query_terms;
    const C: &str = "concurrent_recall_writers";
    let ns = namespace();
    let shared = SessionScope::new(format!("{ns}-f"), "u", "shared", "");
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = store.clone();
        let shared = shared.clone();
        let own = SessionScope::new(format!("{ns}-f"), "u", format!("own-{t}"), "");
        handles.push(tokio::spawn(async move {
            // Ids 0..20 are written by every task; 100 + t by this one only.
            let mut batch: Vec<_> = (0..20)
                .map(|i| {
                    recall_doc(
                        &format!("m{i}"),
                        i,
                        &format!("shared fact number {i} alpha"),
                    )
                })
                .collect();
            batch.push(recall_doc(
                &format!("m{}", 100 + t),
                100 + t as u64,
                "unique beta",
            ));
            let a = shared_index(&*store, &shared, &batch).await;
            let b = shared_index(
                &*store,
                &own,
                &[recall_doc("o", 0, &format!("own gamma {t}"))],
            )
            .await;
            b.and(a)
        }));
    }
    let mut added = 0;
    for h in handles {
        match h.await {
            Ok(Ok(n)) => added += n,
            Ok(Err(e)) => return Err(fail(C, format!("index_documents returned an error: {e}"))),
            Err(e) => return Err(fail(C, format!("a writer task failed: {e}"))),
        }
    }
    let want = 20 + tasks as u64;
    let count = call(C, "indexed_count", store.indexed_count(&shared).await)?;
    ensure!(
        C,
        count == want,
        "the shared scope holds {count} documents, not {want}"
    );
    ensure!(
        C,
        added == want,
        "writers reported {added} new documents, not {want}"
    );
    let beta = call(
        C,
        "search",
        store.search(&shared, &query_terms("beta"), 1000).await,
    )?;
    ensure!(
        C,
        beta.len() == tasks,
        "{} of {tasks} unique documents found",
        beta.len()
    );
    for t in 0..tasks {
        let own = SessionScope::new(format!("{ns}-f"), "u", format!("own-{t}"), "");
        let hits = call(
            C,
            "search",
            store
                .search(&own, &query_terms("gamma alpha beta"), 10)
                .await,
        )?;
        let texts: Vec<&str> = hits.iter().map(|h| h.document.text.as_str()).collect();
        ensure!(
            C,
            texts == [format!("own gamma {t}").as_str()],
            "scope own-{t} found {texts:?}"
        );
    }
    Ok(())
}

/// One writer's batch.
async fn shared_index<S: keel_core::recall::RecallIndex>(
    store: &S,
    scope: &SessionScope,
    docs: &[keel_core::recall::RecallDocument],
) -> Result<u64, StoreError> {
    store.index_documents(scope, docs).await
}
