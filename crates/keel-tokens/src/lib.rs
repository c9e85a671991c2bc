//! # keel-tokens
//!
//! Token counters implementing [`keel_core::tokens::TokenCounter`]:
//!
//! - [`ApproximateCounter`]: LangChain's `count_tokens_approximately`, number for
//!   number (`approximate`, and `approximate-anthropic` at 3.3 characters per token),
//!   with an optional script-aware weighting for CJK and other non-Latin text
//!   ([`ApproximateCounter::script_aware`]).
//! - `TiktokenCounter` (feature `tiktoken`, on by default): exact `o200k_base` /
//!   `cl100k_base` counts with OpenAI's message framing; one tokenizer per process,
//!   loaded on first use or by `exact::warm_up` on a blocking thread.
//! - [`CachedCounter`]: wraps any counter so each message is counted once, and a
//!   conversation that grew by one message costs one message's count.
//! - [`scaling`]: LangChain's usage-metadata scaling of a count, for triggers.
//! - [`counter_by_name`]: a counter from its command-line name.
//!
//! Every counter counts whole requests too: the system message and the tool schemas
//! ([`TokenCounter::count_request`]), which the Python peers leave out.
//!
//! ```
//! use keel_core::message::Message;
//! use keel_core::tokens::TokenCounter;
//! use keel_tokens::{ApproximateCounter, CachedCounter};
//!
//! let counter = CachedCounter::new(ApproximateCounter::langchain());
//! let history = vec![Message::human("hello world"), Message::ai("hi there!")];
//! // ceil((11 + 4) / 4) + 3 = 7 and ceil((9 + 9) / 4) + 3 = 8
//! assert_eq!(counter.count_messages(&history), 15);
//! assert_eq!(counter.count_each(&history), vec![7, 8]);
//! ```

pub mod approx;
pub mod cache;
#[cfg(feature = "tiktoken")]
pub mod exact;
pub mod pyrepr;
pub mod scaling;
pub mod script;

pub use approx::{ApproximateCounter, CharWeighting};
pub use cache::CachedCounter;
#[cfg(feature = "tiktoken")]
pub use exact::{Encoding, TiktokenCounter, TokenizerError, warm_up};
pub use keel_core::tokens::TokenCounter;

/// Names [`counter_by_name`] accepts, in the order help texts list them.
#[cfg(feature = "tiktoken")]
pub const COUNTER_NAMES: &[&str] = &[
    "o200k_base",
    "cl100k_base",
    "approximate",
    "approximate-anthropic",
    "approximate-script",
    "approximate-anthropic-script",
];
/// Names [`counter_by_name`] accepts, in the order help texts list them.
#[cfg(not(feature = "tiktoken"))]
pub const COUNTER_NAMES: &[&str] = &[
    "approximate",
    "approximate-anthropic",
    "approximate-script",
    "approximate-anthropic-script",
];

/// A counter that could not be made from its name.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// No counter has this name.
    #[error("unknown counter {name:?}; valid counters: {}", COUNTER_NAMES.join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The tokenizer failed to load.
    #[cfg(feature = "tiktoken")]
    #[error(transparent)]
    Tokenizer(#[from] exact::TokenizerError),
}

/// The counter called `name` (one of [`COUNTER_NAMES`]). An exact counter loads its
/// tokenizer here if this is the first use in the process (blocking).
pub fn counter_by_name(name: &str) -> Result<Box<dyn TokenCounter>, CounterError> {
    let counter: Box<dyn TokenCounter> = match name {
        "approximate" => Box::new(ApproximateCounter::langchain()),
        "approximate-anthropic" => Box::new(ApproximateCounter::anthropic()),
        "approximate-script" => Box::new(ApproximateCounter::langchain().script_aware()),
        "approximate-anthropic-script" => Box::new(ApproximateCounter::anthropic().script_aware()),
        #[cfg(feature = "tiktoken")]
        other => match Encoding::from_name(other) {
            Some(encoding) => Box::new(TiktokenCounter::new(encoding)?),
            None => {
                return Err(CounterError::Unknown {
                    name: other.to_owned(),
                });
            }
        },
        #[cfg(not(feature = "tiktoken"))]
        other => {
            return Err(CounterError::Unknown {
                name: other.to_owned(),
            });
        }
    };
    Ok(counter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_name_makes_its_counter() {
        for name in COUNTER_NAMES {
            assert_eq!(counter_by_name(name).unwrap().name(), *name);
        }
        let Err(err) = counter_by_name("gpt2") else {
            panic!("gpt2 is not a counter name");
        };
        let err = err.to_string();
        assert!(
            err.contains("\"gpt2\"") && err.contains("approximate-anthropic"),
            "{err}"
        );
    }
}
