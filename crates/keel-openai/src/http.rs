//! The HTTP layer under async-openai's client.
//!
//! async-openai's default executor retries 429 and 5xx answers on its own and drops the
//! response headers of errors, so `Retry-After` would be lost and Keel's retry middleware
//! would retry on top of hidden retries. This service sends each request exactly once and
//! turns a non-success answer into an [`HttpFailure`] carrying status, retry hint and raw
//! body, which [`crate::error`] classifies.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;

use crate::error::{HttpFailure, retry_after_from_headers};

type ResponseFuture = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

/// Sends a request once; errors keep their status, headers' retry hint and body.
#[derive(Clone, Debug)]
pub(crate) struct SendOnce {
    pub(crate) client: reqwest::Client,
}

impl tower::Service<HttpRequestFactory> for SendOnce {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let request = factory.build().await?;
            let response = client.execute(request).await?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            let retry_after = retry_after_from_headers(response.headers());
            let body = response.text().await?;
            Err(OpenAIError::Boxed(Box::new(HttpFailure {
                status: status.as_u16(),
                retry_after,
                body,
            })))
        })
    }
}
