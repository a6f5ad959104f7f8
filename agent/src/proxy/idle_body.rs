//! A request body that fails when its client sends nothing for a while, so a client that
//! trickles (or stops sending) a body cannot hold a proxy connection and its upstream open.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The error type of a proxied body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `inner`, failing once no frame arrived for `idle`.
pub struct IdleTimeoutBody<B> {
    inner: B,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<B> IdleTimeoutBody<B> {
    /// Wraps `inner`; the first frame is due within `idle` from now.
    pub fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }
}

impl<B> Body for IdleTimeoutBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.deadline.as_mut().reset(Instant::now() + this.idle);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                    "request body: nothing received for {:?}",
                    this.idle
                )
                .into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Bytes;

    #[tokio::test]
    async fn a_body_that_stalls_fails_and_one_that_flows_does_not() {
        let (tx, rx) = futures::channel::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        let mut tx = tx;
        let stream = rx;
        let idle = Duration::from_millis(400);
        let mut body = IdleTimeoutBody::new(StreamBody::new(stream), idle);
        for _ in 0..3 {
            tokio::time::sleep(idle / 4).await;
            futures::SinkExt::send(&mut tx, Ok(Frame::data(Bytes::from_static(b"a"))))
                .await
                .unwrap();
            assert!(body.frame().await.unwrap().is_ok(), "frames in time pass");
        }
        let started = std::time::Instant::now();
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(started.elapsed() >= idle);
        assert!(err.to_string().contains("nothing received for"), "{err}");
        drop(tx);
    }
}
