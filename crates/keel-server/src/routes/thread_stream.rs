//! `GET /threads/{thread_id}/stream`: the events of the thread's runs from now on, as
//! LangGraph's thread stream sends them: each run's events, its end told as
//! `metadata {"status": "run_done", "run_id"}`, for as long as the client stays.
//!
//! Event ids are `<run id>:<position in the run's log>`, so `Last-Event-ID` resumes
//! after that event (or after that run, once its events are gone); `-1` starts with
//! the oldest run whose events are kept. Runs of this
//! process are followed; a run executing in another process sharing the database is
//! not (join it with `GET /threads/{thread_id}/runs/{run_id}/stream`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde_json::json;

use crate::auth::Owner;
use crate::error::ApiError;
use crate::extract::{Ids, QueryPairs};
use crate::routes::threads::owned;
use crate::runs::{LiveRun, ModeSet, Next, SseEvent};
use crate::state::AppState;

/// How often a subscriber with no run to follow looks for the thread's next one.
const POLL: Duration = Duration::from_millis(50);

struct ThreadSub {
    app: AppState,
    thread_id: String,
    /// The run being followed, and the position of its next event.
    current: Option<(Arc<LiveRun>, u64)>,
    /// Runs up to this id are done with (streamed, or over before the client came).
    after: Option<String>,
    buffer: VecDeque<(String, SseEvent)>,
    filter: Option<ModeSet>,
}

/// Where a subscriber starts.
enum Start {
    /// With the runs that start from now on (and the one running).
    Now,
    /// With every run whose events are kept (`Last-Event-ID: -1`).
    Beginning,
    /// After event `n - 1` of this run.
    After(String, u64),
}

/// Reads `Last-Event-ID`: `<run id>:<n>`, or `-1` for the beginning.
fn last_event(headers: &HeaderMap) -> Result<Start, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(Start::Now);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text.is_empty() {
        return Ok(Start::Now);
    }
    if text == "-1" {
        return Ok(Start::Beginning);
    }
    text.rsplit_once(':')
        .and_then(|(run, n)| {
            Some(Start::After(
                run.to_owned(),
                n.parse::<u64>().ok()?.checked_add(1)?,
            ))
        })
        .ok_or_else(|| {
            ApiError::Invalid(format!(
                "Last-Event-ID {text:?} is not an event id of this thread's stream (<run id>:<n>)"
            ))
        })
}

/// `GET /threads/{thread_id}/stream?stream_mode=...`.
pub async fn join(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    headers: HeaderMap,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    let filter = crate::routes::runs::stream_mode_filter(&query)?;
    let runs = app.manager.thread_runs(&thread.thread_id);
    let (current, after) = match last_event(&headers)? {
        Start::After(run_id, from) => match runs.iter().find(|r| r.run_id == run_id) {
            Some(live) => (Some((live.clone(), from)), Some(run_id)),
            None => (None, Some(run_id)),
        },
        Start::Beginning => (None, None),
        // From now on: the runs already over are not replayed.
        Start::Now => (
            None,
            runs.iter()
                .filter(|r| r.log.is_closed())
                .map(|r| r.run_id.clone())
                .max(),
        ),
    };
    let sub = ThreadSub {
        app,
        thread_id: thread.thread_id,
        current,
        after,
        buffer: VecDeque::new(),
        filter,
    };
    let mut response = Sse::new(events(sub))
        .keep_alive(KeepAlive::default())
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

fn events(sub: ThreadSub) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    futures::stream::unfold(sub, |mut sub| async move {
        loop {
            if let Some((run_id, event)) = sub.buffer.pop_front() {
                let id = format!("{run_id}:{}", event.id);
                if &*event.event == "end" {
                    let data = json!({"status": "run_done", "run_id": run_id}).to_string();
                    let sse = Event::default().event("metadata").id(id).data(data);
                    return Some((Ok(sse), sub));
                }
                let wanted = match (event.mode, sub.filter) {
                    (Some(mode), Some(filter)) => filter.has(mode),
                    _ => true,
                };
                if wanted {
                    let sse = Event::default()
                        .event(&*event.event)
                        .id(id)
                        .data(event.data());
                    return Some((Ok(sse), sub));
                }
                continue;
            }
            let Some((live, cursor)) = sub.current.clone() else {
                let next = sub
                    .app
                    .manager
                    .thread_runs(&sub.thread_id)
                    .into_iter()
                    .find(|r| sub.after.as_ref().is_none_or(|after| r.run_id > *after));
                match next {
                    Some(live) => {
                        sub.after = Some(live.run_id.clone());
                        sub.current = Some((live, 0));
                    }
                    None => tokio::time::sleep(POLL).await,
                }
                continue;
            };
            match live.log.next(cursor, 64).await {
                Next::Events(events) => {
                    let next = events.last().map_or(cursor, |e| e.id + 1);
                    sub.buffer
                        .extend(events.into_iter().map(|e| (live.run_id.clone(), e)));
                    sub.current = Some((live, next));
                }
                // The oldest events of a long run are gone: go on from the first kept.
                Next::Lost { first_kept } => sub.current = Some((live, first_kept)),
                Next::Closed => sub.current = None,
            }
        }
    })
}
