//! The stack check: what each middleware reads and writes in state
//! ([`StateAccess`]), and which jumps it may take, checked for the whole stack when the
//! agent is built, so a conflict fails here, naming the middleware, instead of mid-run.
//! [`AgentBuilder::build`](crate::AgentBuilder::build) calls [`check_stack`]; it lives
//! with the builder so that keel-core's contract and this check do not import each
//! other.
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use keel_agent::{StackError, check_stack};
//! use keel_core::access::StateAccess;
//! use keel_core::middleware::Middleware;
//!
//! struct Reads;
//!
//! #[async_trait]
//! impl Middleware for Reads {
//!     fn name(&self) -> &str {
//!         "Reads"
//!     }
//!     fn state_access(&self) -> StateAccess {
//!         StateAccess::default().read("todos")
//!     }
//! }
//!
//! let stack: Vec<Arc<dyn Middleware>> = vec![Arc::new(Reads)];
//! let err = check_stack(&stack).unwrap_err();
//! assert!(matches!(err, StackError::UnwrittenRead { ref key, .. } if key == "todos"));
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use keel_core::access::StateAccess;
use keel_core::middleware::{JumpTarget, Middleware};

/// A stack whose declared state access or jumps cannot work together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    /// Two middlewares write the same state key: each would overwrite the other's value.
    #[error(
        "middleware {first:?} and {second:?} both write state key {key:?}: a key has one writer per agent; remove one of them or give one another key"
    )]
    SharedWrite {
        /// The key.
        key: String,
        /// The first writer (outermost).
        first: String,
        /// The second writer.
        second: String,
    },
    /// A middleware reads a key no middleware of the stack writes.
    #[error(
        "middleware {middleware:?} reads state key {key:?}, but no middleware of this agent writes it; add the middleware that owns {key:?} or remove {middleware:?}"
    )]
    UnwrittenRead {
        /// The reader.
        middleware: String,
        /// The key.
        key: String,
    },
    /// A declared key is empty or `messages` (the message list is not a named value).
    #[error(
        "middleware {middleware:?} declares state key {key:?}; allowed: a non-empty name other than \"messages\" (the message list is not a named value)"
    )]
    InvalidKey {
        /// The middleware.
        middleware: String,
        /// The key as declared.
        key: String,
    },
    /// A middleware declares jump targets that none of its hooks can take.
    #[error(
        "middleware {middleware:?} declares jump targets {targets:?}, but none of its hooks can take them: jumps are honoured from before_agent, before_model and after_model (after_agent may only jump to End); declare one of those hooks or remove the targets"
    )]
    UnusableJump {
        /// The middleware.
        middleware: String,
        /// The targets it declares.
        targets: Vec<JumpTarget>,
    },
}

/// Checks a stack (outermost first): every key has at most one writer, every key read is
/// written by some middleware, and every declared jump can be taken by a declared hook.
pub fn check_stack(middleware: &[Arc<dyn Middleware>]) -> Result<(), StackError> {
    let mut writers: HashMap<String, &str> = HashMap::new();
    let accesses: Vec<StateAccess> = middleware.iter().map(|m| m.state_access()).collect();
    for (m, access) in middleware.iter().zip(&accesses) {
        for key in access.reads.iter().chain(&access.writes) {
            if key.is_empty() || key == "messages" {
                return Err(StackError::InvalidKey {
                    middleware: m.name().to_owned(),
                    key: key.clone(),
                });
            }
        }
        for key in &access.writes {
            if let Some(first) = writers.insert(key.clone(), m.name())
                && first != m.name()
            {
                return Err(StackError::SharedWrite {
                    key: key.clone(),
                    first: first.to_owned(),
                    second: m.name().to_owned(),
                });
            }
        }
        check_jumps(m.as_ref())?;
    }
    for (m, access) in middleware.iter().zip(&accesses) {
        if let Some(key) = access.reads.iter().find(|k| !writers.contains_key(*k)) {
            return Err(StackError::UnwrittenRead {
                middleware: m.name().to_owned(),
                key: key.clone(),
            });
        }
    }
    Ok(())
}

fn check_jumps(m: &dyn Middleware) -> Result<(), StackError> {
    let targets = m.jump_targets();
    if targets.is_empty() {
        return Ok(());
    }
    let hooks = m.hooks();
    let any_loop_hook = hooks.before_agent() || hooks.before_model() || hooks.after_model();
    let only_end_after_agent = hooks.after_agent() && targets.iter().all(|t| *t == JumpTarget::End);
    if any_loop_hook || only_end_after_agent {
        return Ok(());
    }
    Err(StackError::UnusableJump {
        middleware: m.name().to_owned(),
        targets: targets.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use keel_core::middleware::MiddlewareError;
    use keel_core::middleware::{HookOutcome, ModelRequest, ModelResponse, Next, Runtime};
    use keel_core::model::ModelError;
    use keel_core::state::AgentState;

    use super::*;

    /// Implements no hook and keeps `Hooks::ALL` (no attribute).
    struct M {
        name: &'static str,
        access: StateAccess,
    }

    #[async_trait]
    impl Middleware for M {
        fn name(&self) -> &str {
            self.name
        }
        fn state_access(&self) -> StateAccess {
            self.access.clone()
        }
    }

    fn m(name: &'static str, access: StateAccess) -> Arc<dyn Middleware> {
        Arc::new(M { name, access })
    }

    /// Wraps the model call only, and lists `.0` as jump targets.
    struct Wrapper(&'static [JumpTarget]);

    #[keel_core::middleware]
    impl Middleware for Wrapper {
        fn name(&self) -> &str {
            "Wrapper"
        }
        fn jump_targets(&self) -> &[JumpTarget] {
            self.0
        }
        async fn wrap_model_call(
            &self,
            request: ModelRequest,
            next: Next<'_>,
        ) -> Result<ModelResponse, ModelError> {
            next.run(request).await
        }
    }

    /// Implements `after_agent` only, and lists `.0` as jump targets.
    struct Ender(&'static [JumpTarget]);

    #[keel_core::middleware]
    impl Middleware for Ender {
        fn name(&self) -> &str {
            "Ender"
        }
        fn jump_targets(&self) -> &[JumpTarget] {
            self.0
        }
        async fn after_agent(
            &self,
            _: &AgentState,
            _: &Runtime,
        ) -> Result<HookOutcome, MiddlewareError> {
            Ok(HookOutcome::proceed())
        }
    }

    #[test]
    fn one_writer_per_key_and_every_read_written() {
        let ok = [
            m("Reader", StateAccess::default().read("todos")),
            m("Owner", StateAccess::default().read("todos").write("todos")),
        ];
        assert_eq!(check_stack(&ok), Ok(()));
        let shared = [
            m("A", StateAccess::default().write("count")),
            m("B", StateAccess::default().write("count")),
        ];
        assert_eq!(
            check_stack(&shared),
            Err(StackError::SharedWrite {
                key: "count".into(),
                first: "A".into(),
                second: "B".into()
            })
        );
        let unwritten = [m("Reader", StateAccess::default().read("todos"))];
        let err = check_stack(&unwritten).unwrap_err();
        assert_eq!(
            err.to_string(),
            "middleware \"Reader\" reads state key \"todos\", but no middleware of this agent writes it; add the middleware that owns \"todos\" or remove \"Reader\""
        );
        let bad = [m("Bad", StateAccess::default().write("messages"))];
        assert!(matches!(
            check_stack(&bad),
            Err(StackError::InvalidKey { .. })
        ));
    }

    #[test]
    fn jumps_need_a_hook_that_can_take_them() {
        let stack: [Arc<dyn Middleware>; 1] = [Arc::new(Wrapper(&[JumpTarget::End]))];
        assert!(matches!(
            check_stack(&stack),
            Err(StackError::UnusableJump { ref middleware, .. }) if middleware == "Wrapper"
        ));
        let end_only: [Arc<dyn Middleware>; 1] = [Arc::new(Ender(&[JumpTarget::End]))];
        assert_eq!(check_stack(&end_only), Ok(()));
        let back: [Arc<dyn Middleware>; 1] = [Arc::new(Ender(&[JumpTarget::Model]))];
        assert!(check_stack(&back).is_err());
    }
}
