//! [`EventLog`]: the events of one run, numbered, kept so a client that reconnects with
//! `Last-Event-ID` gets what it missed, and bounded in bytes.

use std::collections::VecDeque;
use std::sync::Arc;

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
    /// The JSON payload, serialized once for every subscriber.
    pub data: Arc<str>,
    /// The stream mode it belongs to; `None` for `metadata`, `error` and `end`, which
    /// every subscriber receives.
    pub mode: Option<WireMode>,
}

/// What a subscriber gets next.
#[derive(Debug)]
pub enum Next {
    /// Events from the cursor on.
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
    events: VecDeque<SseEvent>,
    /// The id of `events[0]` (ids before it were dropped).
    first_id: u64,
    next_id: u64,
    bytes: usize,
    closed: bool,
}

/// The numbered events of one run. Appends wake every subscriber.
#[derive(Debug)]
pub struct EventLog {
    inner: Mutex<Inner>,
    max_bytes: usize,
    version: watch::Sender<u64>,
}

impl EventLog {
    /// An empty log keeping at most `max_bytes` of payload (the oldest events go first).
    pub fn new(max_bytes: usize) -> Self {
        EventLog {
            inner: Mutex::new(Inner::default()),
            max_bytes,
            version: watch::Sender::new(0),
        }
    }

    /// Appends an event; ignored once the log is closed.
    pub fn push(&self, event: &str, data: String, mode: Option<WireMode>) {
        {
            let mut inner = self.inner.lock();
            if inner.closed {
                return;
            }
            let id = inner.next_id;
            inner.next_id += 1;
            inner.bytes += data.len() + event.len();
            inner.events.push_back(SseEvent {
                id,
                event: Arc::from(event),
                data: Arc::from(data),
                mode,
            });
            while inner.bytes > self.max_bytes && inner.events.len() > 1 {
                if let Some(old) = inner.events.pop_front() {
                    inner.bytes -= old.data.len() + old.event.len();
                    inner.first_id = old.id + 1;
                }
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
        if from < inner.first_id {
            return Err(inner.first_id);
        }
        let skip = usize::try_from(from - inner.first_id).unwrap_or(usize::MAX);
        Ok(inner.events.iter().skip(skip).cloned().collect())
    }

    /// The events with id `>= from`, waiting for some when there are none yet.
    pub async fn next(&self, from: u64) -> Next {
        let mut rx = self.version.subscribe();
        loop {
            {
                let inner = self.inner.lock();
                if from < inner.first_id {
                    return Next::Lost {
                        first_kept: inner.first_id,
                    };
                }
                if from < inner.next_id {
                    let skip = usize::try_from(from - inner.first_id).unwrap_or(usize::MAX);
                    return Next::Events(inner.events.iter().skip(skip).cloned().collect());
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
        log.push("metadata", "{}".into(), None);
        log.push("values", "{\"a\":1}".into(), Some(WireMode::Values));
        let Next::Events(events) = log.next(1).await else {
            panic!("events expected")
        };
        assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [1]);
        let waiter = tokio::spawn({
            let log = log.clone();
            async move { log.next(2).await }
        });
        log.push("end", "null".into(), None);
        let Next::Events(events) = waiter.await.unwrap() else {
            panic!("events expected")
        };
        assert_eq!(&*events[0].event, "end");
        log.close();
        assert!(matches!(log.next(3).await, Next::Closed));

        let small = EventLog::new(10);
        small.push("values", "0123456789".into(), None);
        small.push("values", "0123456789".into(), None);
        assert!(matches!(small.next(0).await, Next::Lost { first_kept: 1 }));
    }
}
