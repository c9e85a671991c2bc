//! The shared typed reads (keel-config), as the stack loader uses them.

pub(crate) use keel_config::{At, known_keys, nearest};

use keel_config::stack::StackError;

/// [`At::invalid`] as a stack error.
pub(crate) trait Refuse {
    /// The value refused: `problem`, and what is `allowed`, at its line.
    fn refuse(&self, problem: &str, allowed: &str) -> StackError;
}

impl Refuse for At<'_> {
    fn refuse(&self, problem: &str, allowed: &str) -> StackError {
        self.invalid(problem, allowed).into()
    }
}
