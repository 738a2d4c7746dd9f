//! Reading request bodies under a size and time limit, and draining what a
//! refused request still sends.
//!
//! Why drain: a plain HTTP/1.1 client (Python's http.client, curl without
//! `Expect`) writes its whole body before it reads anything. If the server
//! answers early and closes while body bytes are still arriving, the kernel
//! resets the connection and the client sees "connection reset" instead of
//! the answer. Reading the rest (within a bound) first lets the answer arrive.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http::header::EXPECT;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Body;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::ApiError;

/// The bounds for one request's body, from the config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    pub(crate) max_bytes: usize,
    pub(crate) read_timeout: Duration,
    pub(crate) drain_max_bytes: u64,
    pub(crate) drain_timeout: Duration,
}

/// Any request body, boxed once at the edge ([`crate::handle`]) so that
/// nothing past it is generic over the body's type.
pub(crate) type AnyBody = UnsyncBoxBody<Bytes, String>;

/// Boxes `body`, its errors kept as their text (all a refusal shows).
pub(crate) fn any_body<B>(body: B) -> AnyBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    body.map_err(|e| e.to_string()).boxed_unsync()
}

/// A request body that remembers how much of it was consumed.
pub(crate) struct RequestBody<B> {
    inner: B,
    limits: BodyLimits,
    /// The Content-Length, when the client declared one.
    declared_len: Option<u64>,
    /// The client waits for `100 Continue` before sending its body; hyper
    /// sends that on the first poll, so an unpolled body was never sent.
    expects_continue: bool,
    polled: bool,
    received: u64,
    ended: bool,
    /// The body failed (client gone, bad chunk encoding): it cannot be read further.
    broken: bool,
    /// The bytes all bodies being read may hold together, shared by every
    /// request of the server; `None` in tests that do not bound it.
    budget: Option<Arc<Semaphore>>,
    /// This body's share of the budget, held until the request is done.
    reserved: Option<OwnedSemaphorePermit>,
}

impl<B> RequestBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    pub(crate) fn new(inner: B, headers: &HeaderMap, limits: BodyLimits) -> Self {
        let ended = inner.is_end_stream();
        let declared_len = inner.size_hint().exact();
        let expects_continue = headers
            .get(EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        RequestBody {
            inner,
            limits,
            declared_len,
            expects_continue,
            polled: false,
            received: 0,
            ended,
            broken: false,
            budget: None,
            reserved: None,
        }
    }

    /// Bounds this body, with every other one sharing `budget`, in bytes.
    pub(crate) fn with_budget(mut self, budget: Arc<Semaphore>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Reserves what this body may grow to (its Content-Length, or the limit
    /// for a chunked one) from the shared budget, waiting while other
    /// bodies hold it, at most the read timeout; then 503.
    async fn reserve(&mut self) -> Result<(), ApiError> {
        let Some(budget) = self.budget.clone() else {
            return Ok(());
        };
        if self.reserved.is_some() {
            return Ok(());
        }
        let want = self.declared_len.map_or(self.limits.max_bytes as u64, |n| {
            n.min(self.limits.max_bytes as u64)
        });
        let want = u32::try_from(want).unwrap_or(u32::MAX).max(1);
        let acquire = budget.acquire_many_owned(want);
        match tokio::time::timeout_at(deadline_after(self.limits.read_timeout), acquire).await {
            Ok(Ok(permit)) => {
                self.reserved = Some(permit);
                Ok(())
            }
            Ok(Err(_)) | Err(_) => Err(ApiError::Unavailable(
                "too many request bodies are being read; retry later".into(),
            )),
        }
    }

    /// The whole body, or 413 as soon as it is known to be over the limit
    /// (from Content-Length before reading anything, or while reading a
    /// chunked body), or 408 if it does not arrive in time.
    pub(crate) async fn read_all(&mut self) -> Result<Bytes, ApiError> {
        let too_large = ApiError::PayloadTooLarge {
            limit: self.limits.max_bytes,
        };
        if self
            .declared_len
            .is_some_and(|n| n > self.limits.max_bytes as u64)
        {
            return Err(too_large);
        }
        self.reserve().await?;
        let deadline = deadline_after(self.limits.read_timeout);
        let mut buf = BytesMut::new();
        while !self.ended {
            let data = match tokio::time::timeout_at(deadline, self.next_data()).await {
                Ok(Ok(data)) => data,
                Ok(Err(e)) => {
                    return Err(ApiError::InvalidRequest(format!(
                        "reading the request body: {e}"
                    )));
                }
                Err(_) => {
                    return Err(ApiError::RequestTimeout(format!(
                        "the request body did not arrive within {} ms",
                        self.limits.read_timeout.as_millis()
                    )));
                }
            };
            if buf.len() + data.len() > self.limits.max_bytes {
                return Err(too_large);
            }
            buf.extend_from_slice(&data);
        }
        Ok(buf.freeze())
    }

    /// Reads and discards what is left of the body, within the drain bounds.
    /// Returns whether the body was read to its end, that is whether the
    /// connection can carry another request.
    pub(crate) async fn finish(&mut self) -> bool {
        if self.ended {
            return true;
        }
        if self.broken {
            return false;
        }
        if self.expects_continue && !self.polled {
            // The client has not sent the body and will not unless told to:
            // answer now and close.
            return false;
        }
        let drain_max = self.received.saturating_add(self.limits.drain_max_bytes);
        if self.declared_len.is_some_and(|n| n > drain_max) {
            // Too much to read through: reading part of it would not save
            // the client from a reset anyway.
            return false;
        }
        let deadline = deadline_after(self.limits.drain_timeout);
        while !self.ended && self.received <= drain_max {
            match tokio::time::timeout_at(deadline, self.next_data()).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) | Err(_) => return false,
            }
        }
        self.ended
    }

    /// The next data bytes (empty at the end or for a trailers frame).
    async fn next_data(&mut self) -> Result<Bytes, B::Error> {
        self.polled = true;
        match self.inner.frame().await {
            None => {
                self.ended = true;
                Ok(Bytes::new())
            }
            Some(Err(e)) => {
                self.broken = true;
                Err(e)
            }
            Some(Ok(frame)) => {
                let data = frame.into_data().unwrap_or_default();
                self.received = self.received.saturating_add(data.len() as u64);
                if self.inner.is_end_stream() {
                    self.ended = true;
                }
                Ok(data)
            }
        }
    }
}

/// `now + d`, or a year from now for a `d` too large to add (`Duration::MAX`
/// in a config means "no limit", not a panic).
fn deadline_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http_body_util::Full;
    use hyper::body::Frame;

    fn limits(max_bytes: usize) -> BodyLimits {
        BodyLimits {
            max_bytes,
            read_timeout: Duration::from_secs(1),
            drain_max_bytes: 100,
            drain_timeout: Duration::from_secs(1),
        }
    }

    /// A chunked body: no Content-Length, its chunks one frame each, then
    /// either its end or (`stall`) silence forever.
    struct Chunks {
        chunks: VecDeque<Bytes>,
        stall: bool,
    }

    fn chunks(sizes: &[usize], stall: bool) -> Chunks {
        Chunks {
            chunks: sizes.iter().map(|&n| Bytes::from(vec![b'x'; n])).collect(),
            stall,
        }
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.chunks.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                None if self.stall => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    fn full(bytes: &'static [u8]) -> Full<Bytes> {
        Full::new(Bytes::from_static(bytes))
    }

    #[tokio::test]
    async fn reads_a_body_within_the_limit() {
        let headers = HeaderMap::new();
        let mut body = RequestBody::new(full(b"12345"), &headers, limits(5));
        assert_eq!(body.read_all().await, Ok(Bytes::from_static(b"12345")));
        assert!(body.finish().await);
    }

    #[tokio::test]
    async fn refuses_a_declared_length_over_the_limit_before_reading() {
        let headers = HeaderMap::new();
        let mut body = RequestBody::new(full(b"123456"), &headers, limits(5));
        assert_eq!(
            body.read_all().await,
            Err(ApiError::PayloadTooLarge { limit: 5 })
        );
        assert!(!body.polled);
        assert!(body.finish().await, "a small remainder is drained");
    }

    #[tokio::test]
    async fn refuses_a_chunked_body_while_reading() {
        let headers = HeaderMap::new();
        let mut body = RequestBody::new(chunks(&[3, 3, 3, 3], false), &headers, limits(5));
        assert_eq!(
            body.read_all().await,
            Err(ApiError::PayloadTooLarge { limit: 5 })
        );
        assert_eq!(
            body.received, 6,
            "stopped at the chunk that crossed the limit"
        );
        assert!(body.finish().await);
        assert_eq!(body.received, 12, "drained the rest");
    }

    #[tokio::test]
    async fn drains_no_more_than_the_bound() {
        let headers = HeaderMap::new();
        let mut body = RequestBody::new(chunks(&[60; 10], false), &headers, limits(5));
        assert!(body.read_all().await.is_err());
        assert!(
            !body.finish().await,
            "600 bytes left is over the drain bound"
        );
        assert!(body.received <= 60 + 100 + 60);
    }

    #[tokio::test]
    async fn expect_continue_body_is_not_drained() {
        let mut headers = HeaderMap::new();
        headers.insert(EXPECT, http::HeaderValue::from_static("100-continue"));
        let mut body = RequestBody::new(full(b"123456"), &headers, limits(5));
        assert!(body.read_all().await.is_err());
        assert!(!body.finish().await);
        assert!(!body.polled, "never asked the client for the body");
    }

    #[tokio::test]
    async fn unbounded_timeouts_do_not_overflow() {
        let headers = HeaderMap::new();
        let limits = BodyLimits {
            read_timeout: Duration::MAX,
            drain_timeout: Duration::MAX,
            ..limits(5)
        };
        let mut body = RequestBody::new(chunks(&[3, 3], false), &headers, limits);
        assert!(body.read_all().await.is_err());
        assert!(body.finish().await);
    }

    #[tokio::test(start_paused = true)]
    async fn bodies_in_flight_share_a_byte_budget() {
        let headers = HeaderMap::new();
        let budget = Arc::new(Semaphore::new(8));
        // A chunked body reserves the whole limit (5) and holds it while it
        // stalls.
        let mut first = RequestBody::new(chunks(&[1], true), &headers, limits(5))
            .with_budget(Arc::clone(&budget));
        let stalled = first.read_all().await;
        assert!(
            matches!(stalled, Err(ApiError::RequestTimeout(_))),
            "{stalled:?}"
        );
        assert_eq!(budget.available_permits(), 3, "held until the request ends");
        // 5 more do not fit next to it: refused after the read timeout.
        let mut second =
            RequestBody::new(full(b"12345"), &headers, limits(5)).with_budget(Arc::clone(&budget));
        let refused = second.read_all().await;
        assert!(
            matches!(refused, Err(ApiError::Unavailable(_))),
            "{refused:?}"
        );
        assert!(!second.polled, "not a byte was read while waiting");
        // 3 do; and once the first is done, its share comes back.
        let mut third =
            RequestBody::new(full(b"123"), &headers, limits(5)).with_budget(Arc::clone(&budget));
        assert_eq!(third.read_all().await, Ok(Bytes::from_static(b"123")));
        drop((first, third));
        assert_eq!(budget.available_permits(), 8);
        let mut fourth =
            RequestBody::new(full(b"12345"), &headers, limits(5)).with_budget(Arc::clone(&budget));
        assert_eq!(fourth.read_all().await, Ok(Bytes::from_static(b"12345")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_times_out() {
        let headers = HeaderMap::new();
        let mut body = RequestBody::new(chunks(&[1], true), &headers, limits(5));
        let got = body.read_all().await;
        assert!(matches!(got, Err(ApiError::RequestTimeout(_))), "{got:?}");
        assert!(!body.finish().await, "drain gives up on a stalled body too");
    }
}
