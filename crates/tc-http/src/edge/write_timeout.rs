//! A write timeout for a connection: hyper has none, so a client that stops
//! reading would hold its connection (and its response's memory) forever.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Wraps a stream so that a write (or flush) which makes no progress for
/// `timeout` fails with [`io::ErrorKind::TimedOut`]; hyper then drops the
/// connection. Every byte accepted by the socket restarts the clock, so a
/// slow but steady reader is not cut off.
pub(crate) struct WriteTimeout<S> {
    inner: S,
    timeout: Duration,
    /// Armed while a write is pending; `None` after progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteTimeout<S> {
    pub(crate) fn new(inner: S, timeout: Duration) -> WriteTimeout<S> {
        WriteTimeout {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// After the inner write returned `poll`: progress disarms the timer, a
    /// pending write arms it (once) and fails when it runs out.
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let stalled = self.stalled.get_or_insert_with(|| {
            // A timeout too large to add means "never": a year will do.
            let deadline = Instant::now()
                .checked_add(timeout)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 24 * 3600));
            Box::pin(tokio::time::sleep_until(deadline))
        });
        ready!(stalled.as_mut().poll(cx));
        self.stalled = None;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client read nothing for {} ms",
                self.timeout.as_millis()
            ),
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_no_progress_times_out() {
        // A pipe whose reader never reads: 64 bytes of buffer, then stuck.
        let (client, _reader) = tokio::io::duplex(64);
        let mut stream = WriteTimeout::new(client, Duration::from_millis(500));
        let started = Instant::now();
        let error = stream.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_reader_is_never_cut_off() {
        use tokio::io::AsyncReadExt;
        let (client, mut reader) = tokio::io::duplex(64);
        let mut stream = WriteTimeout::new(client, Duration::from_millis(500));
        let drain = tokio::spawn(async move {
            let mut got = 0;
            let mut chunk = [0u8; 16];
            while got < 4096 {
                // Slower than the pipe fills, faster than the timeout.
                tokio::time::sleep(Duration::from_millis(100)).await;
                got += reader.read(&mut chunk).await.unwrap();
            }
            got
        });
        stream.write_all(&[1u8; 4096]).await.unwrap();
        assert_eq!(drain.await.unwrap(), 4096);
    }
}
