//! The `tool_retry` entry of a stack file: LangChain's constructor arguments, read and
//! checked here with the middleware they build.

use std::sync::Arc;

use super::{ToolFailure, ToolFailureKind, ToolRetry};
use crate::backoff;
use crate::stack::value::{Ready, Refuse, Settings};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// The `tool_retry` entry.
pub(crate) struct Entry;

impl Entry {
    /// Its settings, in LangChain's names.
    const KEYS: [&'static str; 8] = [
        "max_retries",
        "retry_on",
        "on_failure",
        "backoff_factor",
        "initial_delay",
        "max_delay",
        "jitter",
        "tools",
    ];

    /// The failure kinds `retry_on` may name.
    const KINDS: [&'static str; 3] = ["failed", "invalid_arguments", "unknown"];
}

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "tool_retry"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &Self::KEYS)?;
        let retry_on = match args.get("retry_on") {
            None => vec![ToolFailureKind::Failed],
            Some(v) => v
                .strings()?
                .iter()
                .map(|k| match k.as_str() {
                    "failed" => Ok(ToolFailureKind::Failed),
                    "invalid_arguments" => Ok(ToolFailureKind::InvalidArguments),
                    "unknown" => Ok(ToolFailureKind::Unknown),
                    _ => Err(v.refuse(
                        &format!("{k:?} is not a tool failure kind"),
                        &format!("a list of {}", Self::KINDS.join(", ")),
                    )),
                })
                .collect::<Result<_, _>>()?,
        };
        let on_failure = match args.get("on_failure") {
            None => ToolFailure::Continue,
            Some(v) => match v.choice(&["continue", "error"])? {
                "error" => ToolFailure::Error,
                _ => ToolFailure::Continue,
            },
        };
        let tools = args.get("tools").map(|v| v.strings()).transpose()?;
        let m = ToolRetry::new(backoff::read(&args)?, tools, retry_on, on_failure)
            .map_err(|e| args.refused(e))?;
        Ok(Arc::new(Ready(Arc::new(m))))
    }
}

#[cfg(test)]
mod tests {
    use crate::stack::Stack;

    use crate::stack::tests::err;

    #[test]
    fn refuses_unknown_keys_and_out_of_range_values_with_their_line() {
        assert_eq!(
            err("middleware:\n  - tool_retry:\n      tool: [x]\n"),
            "unknown key middleware[0].tool_retry.tool (line 3) (did you mean `tools`?)"
        );
        assert_eq!(
            err("middleware:\n  - tool_retry:\n      max_retries: -1\n"),
            "middleware[0].tool_retry.max_retries = -1 (line 3): is out of range; allowed: a whole number in [0, 1000]"
        );
        assert_eq!(
            err("middleware:\n  - tool_retry: {backoff_factor: 101}\n"),
            "middleware[0].tool_retry.backoff_factor = 101: is out of range; allowed: a number in [0, 100] (line 2)"
        );
        assert_eq!(
            err("middleware:\n  - tool_retry:\n      retry_on: sometimes\n"),
            "middleware[0].tool_retry.retry_on = \"sometimes\" (line 3): \"sometimes\" is not a tool failure kind; allowed: a list of failed, invalid_arguments, unknown"
        );
        assert!(
            Stack::from_yaml_str(
                "middleware:\n  - tool_retry: {tools: [a], retry_on: [unknown]}\n"
            )
            .is_ok()
        );
    }
}
