//! Tests that read the thread and run records the server keeps, which are not public:
//! records and recovery on SQLite, a run's life under storage that refuses writes, and
//! the accept loop's stop. Written against the crate's public paths (`keel_server::`)
//! like the integration tests in `tests/`, whose helpers they share.

#[path = "../../tests/common/mod.rs"]
mod common;
mod lifecycle;
mod registry;
mod serve;
