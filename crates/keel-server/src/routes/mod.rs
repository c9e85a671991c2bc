//! One module per resource of the Agent Server API, plus the chat page.

pub mod assistants;
pub mod page;
pub mod runs;
pub mod system;
pub mod thread_stream;
pub mod threads;
