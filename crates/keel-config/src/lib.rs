//! The configuration idiom shared by Keel's YAML files (summarization.yaml, the stack
//! file of `keel run`, `keel serve`'s keel.yaml):
//!
//! - [`yaml`]: a YAML tree that remembers the line of every node, parsed with one set of
//!   limits and one wording for syntax errors;
//! - [`ConfigError`]: one refused setting, naming the key, the value, what is wrong,
//!   what is allowed and the line;
//! - [`At`]: typed reads out of the tree, each failing with a [`ConfigError`];
//! - [`from_node`]: a typed (`deny_unknown_fields`) configuration filled from the tree;
//! - [`stack`]: the contract of one kind of stack-file entry ([`stack::StackEntry`]) and
//!   the stack file's error, so each crate owns the entries of its middleware;
//! - [`MAX_STACK_BYTES`] and [`read_capped`]: the cap on a stack file, read once.
//!
//! ```
//! use keel_config::{At, yaml};
//!
//! let root = yaml::parse("limit: -1\n").unwrap();
//! let yaml::Yaml::Map(entries) = &root.value else { unreachable!() };
//! let (key, _, node) = &entries[0];
//! let err = At::new(key.clone(), node).count(10).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "limit = -1 (line 1): is out of range; allowed: a whole number in [0, 10]"
//! );
//! ```

mod de;
mod error;
mod read;
pub mod stack;
pub mod yaml;

pub use de::{DeError, from_node};
pub use error::{ConfigError, at_line};
pub use read::{At, UnknownKey, known_keys, nearest};

use std::path::Path;

/// The largest stack file (`keel run --config`, `keel serve`'s keel.yaml) read: 1 MiB.
pub const MAX_STACK_BYTES: u64 = 1024 * 1024;

/// Why [`read_capped`] could not return a file's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The path names a directory.
    Directory,
    /// The file could not be opened or read (the system's message).
    Io(String),
    /// The file is larger than the cap.
    TooLarge,
    /// The file is not UTF-8 text.
    NotUtf8,
}

/// Reads a whole text file of at most `cap` bytes (reading no more than `cap + 1`).
pub fn read_capped(path: &Path, cap: u64) -> Result<String, ReadError> {
    use std::io::Read as _;
    if path.is_dir() {
        return Err(ReadError::Directory);
    }
    let file = std::fs::File::open(path).map_err(|e| ReadError::Io(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Io(e.to_string()))?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge);
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8)
}
