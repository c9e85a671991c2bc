//! One module per resource of the Agent Server API, plus the chat page.

pub mod assistants;
pub mod page;
pub mod protocol;
pub mod runs;
pub mod store;
pub mod system;
pub mod thread_stream;
pub mod threads;
