//! The `context_editing` entry of a stack file: LangChain's constructor arguments
//! (`edits`, `token_count_method`), read and checked here with the middleware they
//! build.

use std::sync::Arc;

use keel_config::yaml::{Node, Yaml};

use super::{ClearToolUses, ContextEditing};
use crate::stack::value::{At, MAX_LIMIT, Ready, Refuse, Settings, known_keys};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// The `context_editing` entry.
pub(crate) struct Entry;

impl Entry {
    /// Its settings, in LangChain's names.
    const KEYS: [&'static str; 2] = ["edits", "token_count_method"];

    /// The settings of a `clear_tool_uses` edit (LangChain's `ClearToolUsesEdit`).
    const EDIT_KEYS: [&'static str; 6] = [
        "trigger",
        "clear_at_least",
        "keep",
        "clear_tool_inputs",
        "exclude_tools",
        "placeholder",
    ];
}

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "context_editing"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &Self::KEYS)?;
        if let Some(v) = args.get("token_count_method") {
            v.choice(&["approximate"]).map_err(|_| {
                v.refuse(
                    "is not supported: Keel chat models do not count tokens",
                    "approximate (LangChain's count_tokens_approximately)",
                )
            })?;
        }
        let Some(edits) = args.get("edits") else {
            return Ok(Arc::new(Ready(Arc::new(ContextEditing::default()))));
        };
        let Yaml::Seq(items) = &edits.node.value else {
            return Err(edits.refuse("is not a list", "a list of `clear_tool_uses: {...}` edits"));
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let edit = read_edit(&format!("{}[{i}]", edits.key), item)?;
            edit.validate().map_err(|e| args.refused(e))?;
            out.push(edit);
        }
        Ok(Arc::new(Ready(Arc::new(ContextEditing::new(out)))))
    }
}

/// One item of `edits`, at `key`: `clear_tool_uses: {...}`.
fn read_edit(key: &str, item: &Node) -> Result<ClearToolUses, StackError> {
    let entries = At::new(key, item).map()?;
    let [(kind, kind_line, settings)] = entries else {
        return Err(
            At::new(key, item).refuse("is not a one-key mapping", "`clear_tool_uses: {...}`")
        );
    };
    if kind != "clear_tool_uses" {
        return Err(keel_config::UnknownKey {
            key: format!("{key}.{kind}"),
            suggestion: Some("clear_tool_uses".into()),
            line: *kind_line,
        }
        .into());
    }
    let prefix = format!("{key}.clear_tool_uses");
    let fields = At::new(prefix.clone(), settings).map()?;
    known_keys(&prefix, fields, &Entry::EDIT_KEYS)?;
    let mut edit = ClearToolUses::default();
    for (k, _, n) in fields {
        let v = At::new(format!("{prefix}.{k}"), n);
        match k.as_str() {
            "trigger" => edit.trigger = v.count(MAX_LIMIT)?,
            "clear_at_least" => edit.clear_at_least = v.count(MAX_LIMIT)?,
            "keep" => edit.keep = v.count(MAX_LIMIT)? as usize,
            "clear_tool_inputs" => edit.clear_tool_inputs = v.bool()?,
            "exclude_tools" => edit.exclude_tools = v.strings()?,
            _ => edit.placeholder = v.string()?,
        }
    }
    Ok(edit)
}

#[cfg(test)]
mod tests {
    use crate::stack::Stack;

    use crate::stack::tests::err;

    #[test]
    fn refuses_unknown_keys_and_out_of_range_values_with_their_line() {
        assert_eq!(
            err("middleware:\n  - context_editing:\n      edit: []\n"),
            "unknown key middleware[0].context_editing.edit (line 3) (did you mean `edits`?)"
        );
        assert_eq!(
            err(
                "middleware:\n  - context_editing:\n      edits:\n        - clear_tool_uses: {kep: 1}\n"
            ),
            "unknown key middleware[0].context_editing.edits[0].clear_tool_uses.kep (line 4) (did you mean `keep`?)"
        );
        assert_eq!(
            err("middleware:\n  - context_editing:\n      edits:\n        - clear_tools: {}\n"),
            "unknown key middleware[0].context_editing.edits[0].clear_tools (line 4) (did you mean `clear_tool_uses`?)"
        );
        assert_eq!(
            err(
                "middleware:\n  - context_editing:\n      edits:\n        - clear_tool_uses: {trigger: 1000000001}\n"
            ),
            "middleware[0].context_editing.edits[0].clear_tool_uses.trigger = 1000000001 (line 4): is out of range; allowed: a whole number in [0, 1000000000]"
        );
        assert_eq!(
            err("middleware:\n  - context_editing:\n      token_count_method: model\n"),
            "middleware[0].context_editing.token_count_method = \"model\" (line 3): is not supported: Keel chat models do not count tokens; allowed: approximate (LangChain's count_tokens_approximately)"
        );
        assert!(
            Stack::from_yaml_str(
                "middleware:\n  - context_editing: {edits: [{clear_tool_uses: {keep: 1}}]}\n"
            )
            .is_ok()
        );
    }
}
