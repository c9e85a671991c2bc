//! [`AppState`]: what every handler shares. Its own module so that the routes depend on
//! it, and the router (`app`) on the routes, without a circle.

use std::sync::Arc;

use crate::registry::Registry;
use crate::runs::RunManager;
use crate::store_api::ItemStore;

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Thread and run records.
    pub registry: Arc<Registry>,
    /// The runs.
    pub manager: Arc<RunManager>,
    /// [`ServerOptions::max_input_messages`](crate::ServerOptions::max_input_messages).
    pub max_input_messages: usize,
    /// Store API items (long-term memory across threads).
    pub items: Arc<ItemStore>,
}
