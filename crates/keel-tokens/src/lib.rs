//! # keel-tokens
//!
//! Token counters implementing [`keel_core::tokens::TokenCounter`]:
//!
//! - [`ApproximateCounter`]: LangChain's `count_tokens_approximately`, number for
//!   number (`approximate`, and `approximate-anthropic` at 3.3 characters per token),
//!   with an optional script-aware weighting for CJK and other non-Latin text.
//! - [`scaling`]: LangChain's usage-metadata scaling of a count, for triggers.
//!
//! Every counter counts whole requests too: the system message and the tool schemas
//! ([`TokenCounter::count_request`]), which the Python peers leave out.
//!
//! ```
//! use keel_core::message::Message;
//! use keel_core::tokens::TokenCounter;
//! use keel_tokens::ApproximateCounter;
//!
//! let counter = ApproximateCounter::langchain();
//! let history = vec![Message::human("hello world"), Message::ai("hi there!")];
//! // ceil((11 + 4) / 4) + 3 = 7 and ceil((9 + 9) / 4) + 3 = 8
//! assert_eq!(counter.count_messages(&history), 15);
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
