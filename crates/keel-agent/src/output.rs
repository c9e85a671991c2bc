//! What a run hands back: its outcome and the stream modes its consumer asked for.

use keel_core::message::Message;
use keel_core::state::AgentState;
use keel_core::stream::StreamMode;

/// What a finished run returns.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutput {
    /// The thread's state at the end of the run.
    pub state: AgentState,
    /// This run's id (also on every checkpoint it wrote).
    pub run_id: String,
    /// Model steps the run made (wrap hooks may have called the model more or fewer times).
    pub model_steps: usize,
}

impl RunOutput {
    /// The last message in state (usually the final AI answer).
    pub fn last_message(&self) -> Option<&Message> {
        self.state.messages.last()
    }
}

/// Which stream modes a consumer asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Modes {
    pub(crate) values: bool,
    pub(crate) updates: bool,
    pub(crate) messages: bool,
    pub(crate) custom: bool,
    pub(crate) tasks: bool,
    pub(crate) checkpoints: bool,
}

impl Modes {
    pub(crate) const NONE: Modes = Modes {
        values: false,
        updates: false,
        messages: false,
        custom: false,
        tasks: false,
        checkpoints: false,
    };

    pub(crate) fn wants(&self, mode: StreamMode) -> bool {
        match mode {
            StreamMode::Values => self.values,
            StreamMode::Updates => self.updates,
            StreamMode::Messages => self.messages,
            StreamMode::Custom => self.custom,
            StreamMode::Tasks => self.tasks,
            StreamMode::Checkpoints => self.checkpoints,
            // A mode this version of the agent does not produce.
            _ => false,
        }
    }
}

impl From<&[StreamMode]> for Modes {
    fn from(modes: &[StreamMode]) -> Self {
        let has = |m| modes.contains(&m);
        Modes {
            values: has(StreamMode::Values),
            updates: has(StreamMode::Updates),
            messages: has(StreamMode::Messages),
            custom: has(StreamMode::Custom),
            tasks: has(StreamMode::Tasks),
            checkpoints: has(StreamMode::Checkpoints),
        }
    }
}
