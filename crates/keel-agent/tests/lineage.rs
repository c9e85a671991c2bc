//! The message list's lineage reaches middleware, and survives from one run to the next
//! on the same thread (so middleware that remember a list look at new messages only).

use std::sync::Arc;

use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use keel_core::model::ModelError;
use keel_core::state::Lineage;
use keel_testkit::ScriptedModel;
use parking_lot::Mutex;

/// Records each request's lineage and length.
#[derive(Default)]
struct Seen(Mutex<Vec<(Option<Lineage>, usize)>>);

#[keel_core::middleware]
impl Middleware for Seen {
    fn name(&self) -> &str {
        "Seen"
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        self.0
            .lock()
            .push((request.lineage(), request.messages.len()));
        next.run(request).await
    }
}

#[tokio::test]
async fn a_thread_keeps_its_lineage_across_runs_and_a_deleted_one_does_not() {
    let seen = Arc::new(Seen::default());
    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([
            Message::ai("one"),
            Message::ai("two"),
            Message::ai("three"),
        ])))
        .middleware_shared(seen.clone())
        .build()
        .unwrap();
    agent.invoke("t", vec![Message::human("a")]).await.unwrap();
    agent.invoke("t", vec![Message::human("b")]).await.unwrap();
    agent.delete_thread("t").await.unwrap();
    agent.invoke("t", vec![Message::human("c")]).await.unwrap();
    let seen = seen.0.lock().clone();
    assert_eq!(seen.len(), 3);
    let (first, second, third) = (seen[0].0, seen[1].0, seen[2].0);
    assert!(first.is_some(), "the request holds the state's own list");
    assert_eq!(
        first, second,
        "the second run continues the first run's list"
    );
    assert_eq!((seen[0].1, seen[1].1), (1, 3));
    assert_ne!(third, first, "a recreated thread is another list");
}
