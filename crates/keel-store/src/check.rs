//! Input checks and conversions shared by every backend, so that a scope, message or
//! state accepted by one backend is accepted by all of them (a session that starts on
//! SQLite must keep working after a move to PostgreSQL).

use std::collections::HashSet;

use keel_core::store::{SessionScope, StoreError, StoredMessage};

/// Rejects text that PostgreSQL's `TEXT` cannot hold. Every backend applies it so that
/// the three behave alike.
pub(crate) fn text(field: &str, value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        return Err(StoreError::Invalid(format!(
            "{field} contains a NUL character (\\0), which no backend can store; remove it"
        )));
    }
    Ok(())
}

/// Checks every field of a scope.
pub(crate) fn scope(scope: &SessionScope) -> Result<(), StoreError> {
    text("scope.flow_id", &scope.flow_id)?;
    text("scope.user_id", &scope.user_id)?;
    text("scope.session_id", &scope.session_id)?;
    text("scope.context_id", &scope.context_id)
}

/// Checks the three ids that name a session (all its contexts), as
/// `delete_session_states` takes them.
pub(crate) fn session(flow_id: &str, user_id: &str, session_id: &str) -> Result<(), StoreError> {
    text("flow_id", flow_id)?;
    text("user_id", user_id)?;
    text("session_id", session_id)
}

/// Checks a key prefix for `delete_summaries`: storable and not empty (an empty prefix
/// would delete every summary of every session).
pub(crate) fn prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.is_empty() {
        return Err(StoreError::Invalid(
            "prefix is empty, which would delete every cached summary; pass the key prefix of one thread".into(),
        ));
    }
    text("prefix", prefix)
}

/// Checks a batch before `append`: ids are non-empty, storable and unique in the batch.
/// (Uniqueness against stored rows is the backend's job, inside its transaction.)
pub(crate) fn append_batch(messages: &[StoredMessage]) -> Result<(), StoreError> {
    batch_ids(messages.iter().map(|m| m.message.id()))
}

/// The ids of an append batch, in order: each non-empty, valid text, and unique.
pub(crate) fn batch_ids<'a>(ids: impl ExactSizeIterator<Item = &'a str>) -> Result<(), StoreError> {
    let mut seen = HashSet::with_capacity(ids.len());
    for (i, id) in ids.enumerate() {
        if id.is_empty() {
            return Err(StoreError::Invalid(format!(
                "messages[{i}].id is empty; chat history needs a non-empty id per message"
            )));
        }
        text(&format!("messages[{i}].id"), id)?;
        if !seen.insert(id) {
            return Err(StoreError::Invalid(format!(
                "messages[{i}].id {id:?} appears twice in one append batch"
            )));
        }
    }
    Ok(())
}

/// The error for an id that already exists in the scope.
pub(crate) fn duplicate_id(id: &str) -> StoreError {
    StoreError::Invalid(format!(
        "message id {id:?} already exists in this scope; chat history is append-only and ids are unique per scope"
    ))
}

/// A `u64` that must fit SQL's signed 64-bit integer.
pub(crate) fn to_i64(field: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| {
        StoreError::Invalid(format!(
            "{field} = {value} is out of range; the allowed range is 0..={}",
            i64::MAX
        ))
    })
}

/// A stored integer that must be non-negative.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn to_u64(field: &str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::Corrupt(format!("{field} = {value} is negative in storage")))
}

/// A count or limit for SQL `LIMIT`, saturating (nobody stores more than `i64::MAX` rows).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn limit(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The version a successful save writes.
pub(crate) fn next_version(expected_version: u64) -> Result<u64, StoreError> {
    let next = expected_version.checked_add(1).ok_or_else(|| {
        StoreError::Invalid(format!(
            "expected_version = {expected_version} cannot be incremented; the allowed range is 0..{}",
            i64::MAX
        ))
    })?;
    to_i64("expected_version + 1", next)?;
    Ok(next)
}

/// Checks the free-text fields of a state before a save.
pub(crate) fn state_fields(state: &keel_core::store::SessionMemoryState) -> Result<(), StoreError> {
    text("state.summary", &state.summary)?;
    if let Some(model) = &state.summary_model {
        text("state.summary_model", model)?;
    }
    if let Some(c) = &state.covered_until {
        text("state.covered_until.message_id", &c.message_id)?;
    }
    to_i64("state.absorbed_count", state.absorbed_count)?;
    Ok(())
}

/// Milliseconds since the Unix epoch, from this process's clock. Every backend stamps
/// `created_at_ms` / `updated_at_ms` with it, so the three agree on what a timestamp is.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
