//! The `model_retry` entry of a stack file: LangChain's constructor arguments, read
//! and checked here with the middleware they build.

use std::sync::Arc;

use keel_core::model::ModelErrorKind;

use super::{DEFAULT_RETRY_ON, ModelFailure, ModelRetry};
use crate::backoff;
use crate::stack::value::{Ready, Refuse, Settings};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// The `model_retry` entry.
pub(crate) struct Entry;

impl Entry {
    /// Its settings, in LangChain's names.
    const KEYS: [&'static str; 7] = [
        "max_retries",
        "retry_on",
        "on_failure",
        "backoff_factor",
        "initial_delay",
        "max_delay",
        "jitter",
    ];
}

/// The model error kinds `retry_on` may name (serde's names of [`ModelErrorKind`]).
const MODEL_KINDS: [&str; 9] = [
    "rate_limited",
    "server",
    "timeout",
    "connection",
    "authentication",
    "invalid_request",
    "context_overflow",
    "malformed_response",
    "rejected",
];

fn model_kind(name: &str) -> Option<ModelErrorKind> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "model_retry"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &Self::KEYS)?;
        let retry_on = match args.get("retry_on") {
            None => DEFAULT_RETRY_ON.to_vec(),
            Some(v) => v
                .strings()?
                .iter()
                .map(|k| {
                    model_kind(k).ok_or_else(|| {
                        v.refuse(
                            &format!("{k:?} is not a model error kind"),
                            &format!("a list of {}", MODEL_KINDS.join(", ")),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let on_failure = match args.get("on_failure") {
            None => ModelFailure::Continue,
            Some(v) => match v.choice(&["continue", "error"])? {
                "error" => ModelFailure::Error,
                _ => ModelFailure::Continue,
            },
        };
        let m = ModelRetry::new(backoff::read(&args)?, retry_on, on_failure)
            .map_err(|e| args.refused(e))?;
        Ok(Arc::new(Ready(Arc::new(m))))
    }
}

#[cfg(test)]
mod tests {
    use crate::stack::Stack;

    use crate::stack::tests::err;

    #[test]
    fn every_model_kind_is_one_serde_knows() {
        for k in super::MODEL_KINDS {
            assert!(super::model_kind(k).is_some(), "{k}");
        }
    }

    #[test]
    fn refuses_unknown_keys_and_out_of_range_values_with_their_line() {
        assert_eq!(
            err("middleware:\n  - model_retry:\n      max_retrys: 2\n"),
            "unknown key middleware[0].model_retry.max_retrys (line 3) (did you mean `max_retries`?)"
        );
        assert_eq!(
            err("middleware:\n  - model_retry:\n      max_retries: 1001\n"),
            "middleware[0].model_retry.max_retries = 1001 (line 3): is out of range; allowed: a whole number in [0, 1000]"
        );
        assert_eq!(
            err("middleware:\n  - model_retry: {max_delay: 100000}\n"),
            "middleware[0].model_retry.max_delay = 100000: is out of range; allowed: a number in [0, 86400] (line 2)"
        );
        let e = err("middleware:\n  - model_retry:\n      retry_on: [server, flaky]\n");
        assert!(
            e.starts_with("middleware[0].model_retry.retry_on = ")
                && e.contains("(line 3): \"flaky\" is not a model error kind; allowed: a list of rate_limited, server,"),
            "{e}"
        );
        assert!(
            Stack::from_yaml_str(
                "middleware:\n  - model_retry: {retry_on: [timeout], on_failure: error}\n"
            )
            .is_ok()
        );
    }
}
