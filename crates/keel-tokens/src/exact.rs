//! Exact OpenAI token counts with `tiktoken-rs` (feature `tiktoken`, on by default).
//!
//! Two encodings: `o200k_base` (gpt-4o, gpt-4.1, gpt-4.5, gpt-5, the o-series) and
//! `cl100k_base` (gpt-4, gpt-3.5-turbo, text-embedding-3). Each is loaded once per
//! process, on first use, into a shared [`OnceLock`]; loading parses the vocabulary and
//! takes a noticeable fraction of a second (see docs/benchmarks.md), so async callers
//! should run [`warm_up`] on a blocking thread at start-up
//! (`tokio::task::spawn_blocking(|| keel_tokens::exact::warm_up(Encoding::O200kBase))`).
//!
//! Message framing follows OpenAI's published recipe (the "How to count tokens with
//! tiktoken" cookbook): every message costs 3 tokens plus its role, content and name
//! tokens, a name costs one more, and every request is primed with 3 tokens for the
//! reply. Parts OpenAI does not document are counted as what is sent: a tool message's
//! `tool_call_id`, and each tool call's name and JSON arguments plus
//! [`TOKENS_PER_TOOL_CALL`]. An image part costs [`TOKENS_PER_IMAGE`] (a low-detail
//! image); other content parts count as their JSON text.

use std::sync::OnceLock;

use keel_core::message::{Content, ContentPart, Message, MessageBody};
use keel_core::tokens::TokenCounter;
use tiktoken_rs::CoreBPE;

/// Tokens every message costs besides its fields (`<|start|>`, role separator, `<|end|>`).
pub const TOKENS_PER_MESSAGE: u64 = 3;
/// Extra tokens when a message has a name.
pub const TOKENS_PER_NAME: u64 = 1;
/// Tokens that prime every reply (`<|start|>assistant<|message|>`), once per request.
pub const REPLY_PRIMING: u64 = 3;
/// Framing estimate for one tool call besides its name and arguments.
pub const TOKENS_PER_TOOL_CALL: u64 = 3;
/// Cost of one image part (OpenAI's low-detail image).
pub const TOKENS_PER_IMAGE: u64 = 85;

/// An OpenAI byte-pair encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `o200k_base`: gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4.
    O200kBase,
    /// `cl100k_base`: gpt-4, gpt-3.5-turbo, text-embedding-3.
    Cl100kBase,
}

impl Encoding {
    /// Every encoding this crate ships.
    pub const ALL: [Encoding; 2] = [Encoding::O200kBase, Encoding::Cl100kBase];

    /// The encoding's name as tiktoken spells it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    /// The encoding named `name` (`o200k_base`, `cl100k_base`).
    pub fn from_name(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    /// The encoding an OpenAI model uses, from its name (a provider prefix such as
    /// `openai/` and dated suffixes are ignored). `None` for models this crate does not
    /// know; the caller picks a fallback explicitly.
    pub fn for_model(model: &str) -> Option<Encoding> {
        let m = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        let o200k = [
            "gpt-4o",
            "chatgpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "gpt-oss",
            "o1",
            "o3",
            "o4",
        ];
        let cl100k = [
            "gpt-4",
            "gpt-3.5",
            "gpt-35",
            "text-embedding-3",
            "text-embedding-ada-002",
        ];
        let matches = |prefix: &&str| {
            m.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.', ':', '_']))
        };
        if o200k.iter().any(matches) {
            Some(Encoding::O200kBase)
        } else if cl100k.iter().any(matches) {
            Some(Encoding::Cl100kBase)
        } else {
            None
        }
    }
}

/// A tokenizer that could not be had.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TokenizerError {
    /// The embedded vocabulary failed to load (a build problem, not an input problem).
    #[error("loading the {encoding} tokenizer failed: {message}")]
    Load {
        /// The encoding.
        encoding: &'static str,
        /// What failed.
        message: String,
    },
    /// No known encoding for this model name.
    #[error(
        "model {model:?} has no known OpenAI encoding; known: gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4 (o200k_base), gpt-4, gpt-3.5 (cl100k_base)"
    )]
    UnknownModel {
        /// The model name.
        model: String,
    },
}

static O200K: OnceLock<Result<CoreBPE, String>> = OnceLock::new();
static CL100K: OnceLock<Result<CoreBPE, String>> = OnceLock::new();

/// The process-wide tokenizer for `encoding`, loaded on first call. The first call
/// blocks while the vocabulary is parsed; later calls are a pointer read.
pub fn shared_tokenizer(encoding: Encoding) -> Result<&'static CoreBPE, TokenizerError> {
    let cell = match encoding {
        Encoding::O200kBase => &O200K,
        Encoding::Cl100kBase => &CL100K,
    };
    cell.get_or_init(|| {
        let loaded = match encoding {
            Encoding::O200kBase => tiktoken_rs::o200k_base(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base(),
        };
        loaded.map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|message| TokenizerError::Load {
        encoding: encoding.name(),
        message: message.clone(),
    })
}

/// Loads `encoding` now. Run it on a blocking thread at start-up so the first request
/// does not pay the load on an async worker.
pub fn warm_up(encoding: Encoding) -> Result<(), TokenizerError> {
    shared_tokenizer(encoding).map(|_| ())
}

/// True once `encoding` has been loaded in this process.
pub fn is_loaded(encoding: Encoding) -> bool {
    match encoding {
        Encoding::O200kBase => O200K.get().is_some(),
        Encoding::Cl100kBase => CL100K.get().is_some(),
    }
}

/// Exact token counts for OpenAI models.
#[derive(Clone, Copy)]
pub struct TiktokenCounter {
    encoding: Encoding,
    bpe: &'static CoreBPE,
}

impl std::fmt::Debug for TiktokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TiktokenCounter")
            .field("encoding", &self.encoding)
            .finish()
    }
}

impl TiktokenCounter {
    /// A counter for `encoding`, loading the shared tokenizer if this is the first use
    /// in the process (blocking; see [`warm_up`]).
    pub fn new(encoding: Encoding) -> Result<Self, TokenizerError> {
        Ok(TiktokenCounter {
            encoding,
            bpe: shared_tokenizer(encoding)?,
        })
    }

    /// A counter for an OpenAI model name (see [`Encoding::for_model`]).
    pub fn for_model(model: &str) -> Result<Self, TokenizerError> {
        let encoding = Encoding::for_model(model).ok_or_else(|| TokenizerError::UnknownModel {
            model: model.to_owned(),
        })?;
        Self::new(encoding)
    }

    /// The encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    fn tokens(&self, text: &str) -> u64 {
        // Special-token text in user content is ordinary text to the API.
        self.bpe.encode_ordinary(text).len() as u64
    }
}

impl TokenCounter for TiktokenCounter {
    fn name(&self) -> &str {
        self.encoding.name()
    }

    fn count_message(&self, message: &Message) -> u64 {
        let mut n = TOKENS_PER_MESSAGE + self.tokens(message.role().as_str());
        match message.content() {
            Content::Text(s) => n += self.tokens(s),
            Content::Parts(parts) => {
                for part in parts {
                    n += match part {
                        ContentPart::Text(t) => self.tokens(&t.text),
                        ContentPart::Image(_) => TOKENS_PER_IMAGE,
                        ContentPart::Other(v) => self.tokens(&v.to_string()),
                    };
                }
            }
        }
        if let Some(name) = message.name() {
            n += self.tokens(name) + TOKENS_PER_NAME;
        }
        match message.body() {
            MessageBody::Ai(ai) => {
                for call in &ai.tool_calls {
                    n += TOKENS_PER_TOOL_CALL
                        + self.tokens(&call.name)
                        + self.tokens(&call.args.to_string());
                }
            }
            MessageBody::Tool(t) => n += self.tokens(&t.tool_call_id),
            _ => {}
        }
        n
    }

    fn count_text(&self, text: &str) -> u64 {
        self.tokens(text)
    }

    fn request_overhead(&self) -> u64 {
        REPLY_PRIMING
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_pick_encodings() {
        for m in [
            "gpt-4o",
            "gpt-4o-mini",
            "openai/gpt-4.1-2025-04-14",
            "gpt-5",
            "o3-mini",
            "o1",
            "gpt-oss-120b",
        ] {
            assert_eq!(Encoding::for_model(m), Some(Encoding::O200kBase), "{m}");
        }
        for m in ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "gpt-4-0613"] {
            assert_eq!(Encoding::for_model(m), Some(Encoding::Cl100kBase), "{m}");
        }
        for m in ["claude-3-5-sonnet", "llama3", "gpt-40", "o10"] {
            assert_eq!(Encoding::for_model(m), None, "{m}");
        }
        assert!(matches!(
            TiktokenCounter::for_model("llama3"),
            Err(TokenizerError::UnknownModel { .. })
        ));
    }

    #[test]
    fn counts_hello_world() {
        let c = TiktokenCounter::new(Encoding::O200kBase).unwrap();
        assert_eq!(c.count_text("hello world"), 2);
        assert!(is_loaded(Encoding::O200kBase));
    }
}
