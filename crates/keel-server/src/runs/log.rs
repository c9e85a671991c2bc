//! [`EventLog`]: the events of one run, numbered, kept so a client that reconnects with
//! `Last-Event-ID` gets what it missed, and bounded in bytes.
//!
//! Each event is formatted once, as the whole SSE frame, into a shared buffer: every
//! subscriber (and a stuck connection's write queue) holds a reference to the same
//! bytes, never a copy. An event can name a key (`messages/partial` events name their
//! message): pushing another event with the same key drops the earlier one, which the
//! later one supersedes, so the log keeps one partial per message however many were
//! streamed.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use axum::body::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::modes::WireMode;

/// One server-sent event of a run.
#[derive(Clone, Debug)]
pub struct SseEvent {
    /// Position in the run's log, from 0; sent as the SSE `id`.
    pub id: u64,
    /// The SSE `event` name (`metadata`, `values`, `messages/partial`, `end`, ...).
    pub event: Arc<str>,
    /// The whole SSE frame (`event:`, `id:`, `data:` lines and the blank line), formatted
    /// once and shared by every subscriber.
    pub frame: Bytes,
    /// Where the payload lies in `frame`.
    data_at: (usize, usize),
    /// The stream mode it belongs to; `None` for `metadata`, `error` and `end`, which
    /// every subscriber receives.
    pub mode: Option<WireMode>,
}

impl SseEvent {
    /// Formats an event as its SSE frame. The payload is JSON, where a line break can
    /// only be whitespace between tokens, so any is sent as a space: the frame then has
    /// one `data:` line and the payload reads back the same.
    pub fn new(id: u64, event: &str, data: &str, mode: Option<WireMode>) -> SseEvent {
        let mut frame = String::with_capacity(event.len() + data.len() + 40);
        frame.push_str("event: ");
        frame.push_str(event);
        frame.push_str("\nid: ");
        frame.push_str(&id.to_string());
        frame.push_str("\ndata: ");
        let start = frame.len();
        if data.contains(['\n', '\r']) {
            frame.extend(
                data.chars()
                    .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
            );
        } else {
            frame.push_str(data);
        }
        let end = frame.len();
        frame.push_str("\n\n");
        SseEvent {
            id,
            event: Arc::from(event),
            frame: Bytes::from(frame),
            data_at: (start, end),
            mode,
        }
    }

    /// The JSON payload.
    pub fn data(&self) -> &str {
        self.frame
            .get(self.data_at.0..self.data_at.1)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }
}

/// What a subscriber gets next.
#[derive(Debug)]
pub enum Next {
    /// Events from the cursor on (at most as many as asked for), in order; the next
    /// cursor is the last one's id plus one.
    Events(Vec<SseEvent>),
    /// Events up to this id were dropped to stay under the byte cap; the subscriber
    /// cannot resume from where it asked.
    Lost {
        /// The oldest id still kept.
        first_kept: u64,
    },
    /// Nothing more will come.
    Closed,
}

#[derive(Debug, Default)]
struct Inner {
    /// `None` marks an event superseded by a later one with the same key.
    events: VecDeque<Option<SseEvent>>,
    /// The id of `events[0]`.
    start_id: u64,
    /// Ids before this were dropped to stay under the cap (a superseded event is not
    /// lost: a later event carries what it said).
    lost_before: u64,
    next_id: u64,
    bytes: usize,
    /// The id of the latest event pushed with each key.
    latest: HashMap<String, u64>,
    closed: bool,
}

impl Inner {
    /// Up to `max` kept events with id `>= from`.
    fn from(&self, from: u64, max: usize) -> Vec<SseEvent> {
        let from = from.max(self.start_id);
        let skip = usize::try_from(from - self.start_id).unwrap_or(usize::MAX);
        self.events
            .iter()
            .skip(skip)
            .flatten()
            .take(max)
            .cloned()
            .collect()
    }
}

/// The numbered events of one run. Appends wake every subscriber.
#[derive(Debug)]
pub struct EventLog {
    inner: Mutex<Inner>,
    max_bytes: usize,
    version: watch::Sender<u64>,
}

impl EventLog {
    /// An empty log keeping at most `max_bytes` of frames (the oldest events go first).
    pub fn new(max_bytes: usize) -> Self {
        EventLog {
            inner: Mutex::new(Inner::default()),
            max_bytes,
            version: watch::Sender::new(0),
        }
    }

    /// Appends an event; ignored once the log is closed. With a `key`, the previous
    /// event pushed with the same key is dropped: this one supersedes it.
    pub fn push(&self, event: &str, data: &str, mode: Option<WireMode>, key: Option<&str>) {
        {
            let mut inner = self.inner.lock();
            if inner.closed {
                return;
            }
            let id = inner.next_id;
            inner.next_id += 1;
            let sse = SseEvent::new(id, event, data, mode);
            if let Some(key) = key
                && let Some(old) = inner.latest.insert(key.to_owned(), id)
                && let Some(i) = old
                    .checked_sub(inner.start_id)
                    .and_then(|i| usize::try_from(i).ok())
                && let Some(gone) = inner.events.get_mut(i).and_then(Option::take)
            {
                inner.bytes -= gone.frame.len();
            }
            inner.bytes += sse.frame.len();
            inner.events.push_back(Some(sse));
            loop {
                match inner.events.front() {
                    Some(None) => {}
                    Some(Some(_)) if inner.bytes > self.max_bytes && inner.events.len() > 1 => {}
                    _ => break,
                }
                if let Some(Some(old)) = inner.events.pop_front() {
                    inner.bytes -= old.frame.len();
                    inner.lost_before = old.id + 1;
                }
                inner.start_id += 1;
            }
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// Marks the end of the run's events.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.version.send_modify(|v| *v += 1);
    }

    /// True once the run has finished writing.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Bytes of frames kept now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    /// The oldest id a subscriber can still start from.
    pub fn first_kept(&self) -> u64 {
        self.inner.lock().lost_before
    }

    /// Waits until the log is closed.
    pub async fn closed(&self) {
        let mut rx = self.version.subscribe();
        loop {
            if self.is_closed() {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// The events with id `>= from` kept now (empty when there are none yet), without
    /// waiting; `Err(first_kept)` when some of them were dropped.
    pub fn since(&self, from: u64) -> Result<Vec<SseEvent>, u64> {
        let inner = self.inner.lock();
        if from < inner.lost_before {
            return Err(inner.lost_before);
        }
        Ok(inner.from(from, usize::MAX))
    }

    /// Up to `max` events with id `>= from`, waiting for some when there are none yet.
    pub async fn next(&self, from: u64, max: usize) -> Next {
        let mut rx = self.version.subscribe();
        loop {
            {
                let inner = self.inner.lock();
                if from < inner.lost_before {
                    return Next::Lost {
                        first_kept: inner.lost_before,
                    };
                }
                let events = inner.from(from, max.max(1));
                if !events.is_empty() {
                    return Next::Events(events);
                }
                if inner.closed {
                    return Next::Closed;
                }
                rx.mark_unchanged();
            }
            if rx.changed().await.is_err() {
                return Next::Closed;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resumes_after_an_id_and_drops_the_oldest_over_the_cap() {
        let log = Arc::new(EventLog::new(1000));
        log.push("metadata", "{}", None, None);
        log.push("values", "{\"a\":1}", Some(WireMode::Values), None);
        let Next::Events(events) = log.next(1, 10).await else {
            panic!("events expected")
        };
        assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [1]);
        assert_eq!(events[0].data(), "{\"a\":1}");
        assert_eq!(
            &events[0].frame[..],
            b"event: values\nid: 1\ndata: {\"a\":1}\n\n"
        );
        let waiter = tokio::spawn({
            let log = log.clone();
            async move { log.next(2, 10).await }
        });
        log.push("end", "null", None, None);
        let Next::Events(events) = waiter.await.unwrap() else {
            panic!("events expected")
        };
        assert_eq!(&*events[0].event, "end");
        log.close();
        assert!(matches!(log.next(3, 10).await, Next::Closed));

        let small = EventLog::new(40);
        small.push("values", "0123456789", None, None);
        small.push("values", "0123456789", None, None);
        assert!(matches!(
            small.next(0, 10).await,
            Next::Lost { first_kept: 1 }
        ));
        assert_eq!(small.first_kept(), 1);
    }

    #[tokio::test]
    async fn a_keyed_event_replaces_the_one_it_supersedes() {
        let log = EventLog::new(1 << 20);
        log.push("messages/metadata", "{}", None, None);
        for text in ["\"a\"", "\"ab\"", "\"abc\""] {
            log.push("messages/partial", text, None, Some("m1"));
            log.push("messages", "\"delta\"", None, None);
        }
        let Next::Events(events) = log.next(0, 100).await else {
            panic!("events expected")
        };
        let kept: Vec<(u64, &str)> = events.iter().map(|e| (e.id, e.data())).collect();
        assert_eq!(
            kept,
            [
                (0, "{}"),
                (2, "\"delta\""),
                (4, "\"delta\""),
                (5, "\"abc\""),
                (6, "\"delta\"")
            ]
        );
        // Only what is kept is counted, and a cursor on a superseded event is not lost.
        let frames: usize = events.iter().map(|e| e.frame.len()).sum();
        assert_eq!(log.bytes(), frames);
        let Next::Events(events) = log.next(1, 1).await else {
            panic!("events expected")
        };
        assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_payload_with_line_breaks_stays_one_data_line() {
        let e = SseEvent::new(7, "values", "{\n \"a\": 1\r\n}", None);
        assert_eq!(e.data(), "{  \"a\": 1  }");
        assert_eq!(
            &e.frame[..],
            b"event: values\nid: 7\ndata: {  \"a\": 1  }\n\n"
        );
    }
}
