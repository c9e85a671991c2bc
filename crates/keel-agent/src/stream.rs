//! [`AgentStream`]: a run's events, in order, then its outcome.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use keel_core::stream::StreamEvent;
use tokio::sync::mpsc;

use crate::error::AgentError;
use crate::output::{Modes, RunOutput};

type RunFuture = Pin<Box<dyn Future<Output = Result<RunOutput, AgentError>> + Send>>;

enum Slot {
    Running(RunFuture),
    Done(Result<RunOutput, AgentError>),
}

/// The events of one run, in the order they happened, filtered to the requested modes.
///
/// The run makes progress only while the stream is polled (nothing is spawned), so a
/// dropped stream cancels the run. When the stream ends, [`into_result`](Self::into_result)
/// gives the run's outcome; [`finish`](Self::finish) skips the remaining events and
/// waits for it.
pub struct AgentStream {
    rx: mpsc::UnboundedReceiver<StreamEvent>,
    modes: Modes,
    slot: Slot,
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentStream")
            .field("modes", &self.modes)
            .field("done", &matches!(self.slot, Slot::Done(_)))
            .finish_non_exhaustive()
    }
}

impl AgentStream {
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<StreamEvent>,
        modes: Modes,
        run: RunFuture,
    ) -> Self {
        AgentStream {
            rx,
            modes,
            slot: Slot::Running(run),
        }
    }

    /// The run's outcome, once the stream has ended; `None` while it is still running.
    pub fn into_result(self) -> Option<Result<RunOutput, AgentError>> {
        match self.slot {
            Slot::Done(result) => Some(result),
            Slot::Running(_) => None,
        }
    }

    /// Runs to the end, dropping events not yet read, and returns the outcome.
    pub async fn finish(self) -> Result<RunOutput, AgentError> {
        match self.slot {
            Slot::Done(result) => result,
            Slot::Running(run) => run.await,
        }
    }
}

impl Stream for AgentStream {
    type Item = StreamEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        let this = self.get_mut();
        loop {
            // Events already sent come first: they happened before anything the run does next.
            if let Ok(event) = this.rx.try_recv() {
                if this.modes.wants(event.mode()) {
                    return Poll::Ready(Some(event));
                }
                continue;
            }
            match &mut this.slot {
                Slot::Running(run) => match run.as_mut().poll(cx) {
                    Poll::Ready(result) => this.slot = Slot::Done(result),
                    // Events sent during that poll are ready now; otherwise the run's own
                    // wake-up brings us back.
                    Poll::Pending if this.rx.is_empty() => return Poll::Pending,
                    Poll::Pending => {}
                },
                // Writers cloned by middleware may outlive the run: end on empty, not on close.
                Slot::Done(_) => return Poll::Ready(None),
            }
        }
    }
}
