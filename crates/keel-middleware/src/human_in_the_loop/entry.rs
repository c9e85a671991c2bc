//! The `human_in_the_loop` entry of a stack file: LangChain's constructor arguments
//! (`interrupt_on`, `description_prefix`) and Keel's `interrupt_mode`, read and
//! checked here with the middleware they build.

use std::sync::Arc;

use keel_config::yaml::{Node, Yaml};

use super::{DEFAULT_DESCRIPTION_PREFIX, DecisionType, HumanInTheLoop, InterruptMode, InterruptOn};
use crate::error::ConfigError;
use crate::stack::value::{At, Ready, Refuse, Settings, known_keys};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// The `human_in_the_loop` entry.
pub(crate) struct Entry;

impl Entry {
    /// Its settings.
    const KEYS: [&'static str; 3] = ["interrupt_on", "description_prefix", "interrupt_mode"];
    /// The settings of one gated tool, when not `true` or `false`.
    const TOOL_KEYS: [&'static str; 2] = ["allowed_decisions", "description"];
}

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "human_in_the_loop"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &Self::KEYS)?;
        let mode = match args.get("interrupt_mode") {
            Some(v) => match v.choice(&["batched", "per_call"])? {
                "per_call" => InterruptMode::PerCall,
                _ => InterruptMode::Batched,
            },
            None => InterruptMode::Batched,
        };
        let prefix = match args.get("description_prefix") {
            Some(v) => v.string()?,
            None => DEFAULT_DESCRIPTION_PREFIX.into(),
        };
        let Some(on) = args.get("interrupt_on") else {
            return Err(args.refused(ConfigError::new(
                "human_in_the_loop",
                "interrupt_on",
                "(missing)",
                "is required",
                "a mapping {tool: true | false | {allowed_decisions: [...], description: TEXT}}",
            )));
        };
        let mut list = Vec::new();
        for (tool, _, node) in on.map()? {
            let v = At::new(format!("{}.{tool}", on.key), node);
            match &node.value {
                Yaml::Bool(true) => list.push((tool.clone(), InterruptOn::all())),
                Yaml::Bool(false) => {}
                _ => list.push((tool.clone(), read_tool(&v)?)),
            }
        }
        let m = HumanInTheLoop::new(list, prefix)
            .map_err(|e| args.refused(e))?
            .with_mode(mode);
        Ok(Arc::new(Ready(Arc::new(m))))
    }
}

/// One gated tool's settings, at `v`: `{allowed_decisions: [...], description: TEXT}`.
fn read_tool(v: &At<'_>) -> Result<InterruptOn, StackError> {
    let fields: &[(String, u64, Node)] = v.map()?;
    known_keys(&v.key, fields, &Entry::TOOL_KEYS)?;
    let mut config = InterruptOn {
        allowed_decisions: Vec::new(),
        description: None,
    };
    for (k, _, n) in fields {
        let f = At::new(format!("{}.{k}", v.key), n);
        if k == "description" {
            config.description = Some(f.string()?);
            continue;
        }
        for d in f.strings()? {
            config.allowed_decisions.push(match d.as_str() {
                "approve" => DecisionType::Approve,
                "edit" => DecisionType::Edit,
                "reject" => DecisionType::Reject,
                "respond" => DecisionType::Respond,
                _ => {
                    return Err(f.refuse(
                        &format!("{d:?} is not a decision"),
                        "a list of approve, edit, reject, respond",
                    ));
                }
            });
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {

    use crate::stack::tests::err;

    #[test]
    fn refuses_unknown_keys_and_bad_values_with_their_line() {
        assert_eq!(
            err("middleware:\n  - human_in_the_loop:\n      interrupt_of: {x: true}\n"),
            "unknown key middleware[0].human_in_the_loop.interrupt_of (line 3) (did you mean `interrupt_on`?)"
        );
        assert_eq!(
            err(
                "middleware:\n  - human_in_the_loop:\n      interrupt_on:\n        x: {allowed: [approve]}\n"
            ),
            "unknown key middleware[0].human_in_the_loop.interrupt_on.x.allowed (line 4) (did you mean `allowed_decisions`?)"
        );
        assert_eq!(
            err(
                "middleware:\n  - human_in_the_loop:\n      interrupt_on:\n        x: {allowed_decisions: []}\n"
            ),
            "middleware[0].human_in_the_loop.interrupt_on.x.allowed_decisions = []: no decision is allowed; allowed: a non-empty list of approve, edit, reject, respond (line 2)"
        );
        assert_eq!(
            err("middleware:\n  - human_in_the_loop: {description_prefix: x}\n"),
            "middleware[0].human_in_the_loop.interrupt_on = (missing): is required; allowed: a mapping {tool: true | false | {allowed_decisions: [...], description: TEXT}} (line 2)"
        );
    }
}
