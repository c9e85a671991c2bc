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
    /// The file could not be opened or read: the error's kind and the system's message.
    Io {
        /// The kind ([`describe_io`] words the common ones).
        kind: std::io::ErrorKind,
        /// The system's message.
        message: String,
    },
    /// The file is larger than the cap.
    TooLarge,
    /// The file is not UTF-8 text: where the first bad byte is.
    NotUtf8 {
        /// Its line (from 1).
        line: usize,
        /// Its byte offset in the file.
        offset: usize,
        /// The byte.
        byte: u8,
    },
}

impl ReadError {
    fn io(error: std::io::Error) -> Self {
        ReadError::Io {
            kind: error.kind(),
            message: error.to_string(),
        }
    }
}

/// An I/O error in a few plain words: `no such file`, `permission denied`, or the
/// system's message without its `(os error N)` suffix.
pub fn describe_io(kind: std::io::ErrorKind, message: &str) -> String {
    use std::io::ErrorKind;
    match kind {
        ErrorKind::NotFound => "no such file".to_owned(),
        ErrorKind::PermissionDenied => "permission denied".to_owned(),
        ErrorKind::IsADirectory => "it is a directory".to_owned(),
        _ => message
            .split(" (os error")
            .next()
            .unwrap_or(message)
            .to_owned(),
    }
}

/// Reads a whole text file of at most `cap` bytes (reading no more than `cap + 1`).
/// Every Keel configuration file (stack files, `keel.yaml`, `summarization.yaml`) is
/// read with this; each loader words the [`ReadError`] in its own error type.
pub fn read_capped(path: &Path, cap: u64) -> Result<String, ReadError> {
    use std::io::Read as _;
    if path.is_dir() {
        return Err(ReadError::Directory);
    }
    let file = std::fs::File::open(path).map_err(ReadError::io)?;
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::io)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge);
    }
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        ReadError::NotUtf8 {
            line: 1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count(),
            offset,
            byte: bytes[offset],
        }
    })
}
