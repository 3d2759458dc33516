//! An upstream connection that knows when its exchange's request went out and when the answer
//! came in, so that the gate learns the upstream's time and not the proxy's.
//!
//! A permit is held from the gate's admission until the response's last byte is passed on,
//! and that span holds the proxy's own delays: the wait for the connection's task to write
//! the request, for it to read the answer, for the client's task to take it. On a proxy that
//! has CPU to spare they are microseconds. On one that is itself the bottleneck (a flood in
//! front of a fast upstream, docs/performance.md "The proxy-bound overload") they are its
//! whole backlog, and a limit fed them reads the proxy's overload as the upstream's queue:
//! it shrinks, queues, and its queue turns away requests the proxy has already paid to read
//! and the upstream could serve.
//!
//! So an HTTP/1.1 exchange is timed at the socket: from the first write of its request to
//! the arrival of the last bytes of its answer read so far. The arrival is the kernel's
//! receive time (`SO_TIMESTAMPNS`, on Linux), taken when the packet reached the socket,
//! however long the proxy then took to read it; where the kernel gives none (another system,
//! the option refused), the time of the read stands in, which still leaves out the wait
//! before the write and after the read. Both are wall-clock times (the kernel's stamp is),
//! read as nanoseconds since the Unix epoch; the gate never takes more than the time the
//! slot was held ([`tidegate_core::gate::Permit::measured`]), so a clock step cannot inflate
//! a sample. A shared HTTP/2 connection carries many exchanges at once and is not timed
//! this way: its requests teach the gate their whole span, as before.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// When the exchange under way on one connection wrote its request and received its answer,
/// in nanoseconds since the Unix epoch; 0 for not yet.
#[derive(Debug, Default)]
pub(crate) struct Stamps {
    written: AtomicU64,
    received: AtomicU64,
}

impl Stamps {
    /// A new exchange starts on the connection: what the last one did is forgotten.
    pub(crate) fn start(&self) {
        self.written.store(0, Ordering::Relaxed);
        self.received.store(0, Ordering::Relaxed);
    }

    /// From the request's first write to the arrival of the answer's latest bytes, if both
    /// happened in this exchange.
    pub(crate) fn upstream_time(&self) -> Option<Duration> {
        let written = self.written.load(Ordering::Relaxed);
        let received = self.received.load(Ordering::Relaxed);
        (written != 0 && received >= written).then(|| Duration::from_nanos(received - written))
    }

    fn wrote(&self) {
        if self.written.load(Ordering::Relaxed) == 0 {
            self.written.store(wall_clock(), Ordering::Relaxed);
        }
    }

    /// Bytes that arrived at `at` were read. Before the request was written they belong to
    /// no exchange (the end of the last one, a close).
    fn received(&self, at: u64) {
        if self.written.load(Ordering::Relaxed) != 0 {
            self.received.store(at, Ordering::Relaxed);
        }
    }
}

/// Nanoseconds since the Unix epoch, the kernel's receive stamps' clock (never 0).
fn wall_clock() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// A TCP connection to an upstream that stamps its exchanges in [`Stamps`].
#[derive(Debug)]
pub(crate) struct TimedStream {
    tcp: TcpStream,
    stamps: Arc<Stamps>,
    /// Room for the receive time's control message.
    #[cfg(target_os = "linux")]
    control: Vec<u8>,
    /// How much of the reader's buffer the next read offers the kernel (see [`ReadSize`]).
    #[cfg(target_os = "linux")]
    read_size: ReadSize,
}

/// How many bytes a read into the reader's buffer offers the kernel. `recvmsg` needs
/// initialized memory and hyper lends an uninitialized buffer of 8-16 KiB for every read, so
/// the bytes offered are zeroed first: all of them, for a 200-byte answer, were a third of
/// the proxy's user-space instructions per request (`bench/instructions.sh`). The size
/// follows what the reads bring, as hyper's own read strategy does: it doubles after a read
/// that filled it and halves after one that used less than a quarter, between
/// [`ReadSize::MIN`] and the buffer's room. A large answer costs a few more reads while it
/// grows (2, 4, 8, 16 KiB...), a small one zeroes 2 KiB.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadSize(usize);

#[cfg(target_os = "linux")]
impl ReadSize {
    const MIN: usize = 2 * 1024;
    const MAX: usize = 1024 * 1024;

    /// After a read of `read` bytes into `offered`.
    fn next(self, offered: usize, read: usize) -> ReadSize {
        if read >= offered {
            ReadSize((self.0 * 2).min(Self::MAX))
        } else if read < offered / 4 {
            ReadSize((self.0 / 2).max(Self::MIN))
        } else {
            self
        }
    }
}

impl TimedStream {
    /// Asks the kernel for receive times on `tcp`; without them, reads are stamped when
    /// they happen.
    pub(crate) fn new(tcp: TcpStream, stamps: Arc<Stamps>) -> TimedStream {
        #[cfg(target_os = "linux")]
        {
            use nix::sys::socket::{setsockopt, sockopt::ReceiveTimestampns};
            let _ = setsockopt(&tcp, ReceiveTimestampns, &true);
            TimedStream {
                tcp,
                stamps,
                control: nix::cmsg_space!(nix::sys::time::TimeSpec),
                read_size: ReadSize(ReadSize::MIN),
            }
        }
        #[cfg(not(target_os = "linux"))]
        TimedStream { tcp, stamps }
    }
}

#[cfg(target_os = "linux")]
impl AsyncRead for TimedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let TimedStream {
            tcp,
            stamps,
            control,
            read_size,
        } = self.get_mut();
        loop {
            std::task::ready!(tcp.poll_read_ready(cx))?;
            let offered = read_size.0.min(buf.remaining());
            let into = buf.initialize_unfilled_to(offered);
            let mut received = None;
            let result = tcp.try_io(tokio::io::Interest::READABLE, || {
                let (read, arrived) = receive(tcp, into, control)?;
                received = Some((read, arrived));
                // A read that brought less than it offered emptied the socket: told
                // "would block", `try_io` clears the readiness (unless an event came in
                // meanwhile), so the next read waits for the event loop instead of spending
                // a `recvmsg` that finds nothing, as tokio's own reads do. That was one
                // system call in seven of a forwarded request.
                if read > 0 && read < offered {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(())
            });
            match (received, result) {
                (Some((read, arrived)), _) => {
                    *read_size = read_size.next(offered, read);
                    if read > 0 {
                        stamps.received(arrived.unwrap_or_else(wall_clock));
                    }
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale: `try_io` cleared it, so the next poll waits.
                (None, Err(error)) if error.kind() == io::ErrorKind::WouldBlock => {}
                (None, Err(error)) => return Poll::Ready(Err(error)),
                (None, Ok(())) => {}
            }
        }
    }
}

/// One `recvmsg` into `into`: how many bytes, and when the kernel received them (the last
/// of them, for a read that spans packets), if it said.
#[cfg(target_os = "linux")]
fn receive(
    tcp: &TcpStream,
    into: &mut [u8],
    control: &mut [u8],
) -> io::Result<(usize, Option<u64>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::AsRawFd;
    let mut iov = [io::IoSliceMut::new(into)];
    let message = recvmsg::<()>(tcp.as_raw_fd(), &mut iov, Some(control), MsgFlags::empty())
        .map_err(io::Error::from)?;
    let arrived = message.cmsgs().ok().and_then(|mut messages| {
        messages.find_map(|message| match message {
            ControlMessageOwned::ScmTimestampns(at) => {
                let nanos = i128::from(at.tv_sec()) * 1_000_000_000 + i128::from(at.tv_nsec());
                u64::try_from(nanos).ok().filter(|&nanos| nanos != 0)
            }
            _ => None,
        })
    });
    Ok((message.bytes, arrived))
}

#[cfg(not(target_os = "linux"))]
impl AsyncRead for TimedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.tcp).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.stamps.received(wall_clock());
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for TimedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Stamped before the write: the request is out once it returns, and a stamp taken
        // after could follow the answer's arrival on a proxy descheduled in between.
        if !buf.is_empty() {
            this.stamps.wrote();
        }
        Pin::new(&mut this.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if bufs.iter().any(|buf| !buf.is_empty()) {
            this.stamps.wrote();
        }
        Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The proxy's upstream end (timed) and the upstream's (a plain blocking socket).
    async fn pair() -> (TimedStream, Arc<Stamps>, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let proxy_end = TcpStream::connect(address).await.expect("connect");
        let (upstream_end, _) = listener.accept().expect("accept");
        let stamps = Arc::new(Stamps::default());
        (
            TimedStream::new(proxy_end, stamps.clone()),
            stamps,
            upstream_end,
        )
    }

    /// The upstream's answer sits in the socket while the proxy is busy elsewhere: what the
    /// exchange measures ends when the answer arrived, before the proxy read it. A read
    /// stamped when it happens (the proxy's delay in the sample) never passes.
    ///
    /// The kernel turns receive stamps on for the whole system in a deferred work item the
    /// first time a socket asks, so the first exchanges may come without one (and are then
    /// stamped at the read): the test passes on the first exchange that has one. The work
    /// item runs when a kernel worker gets a CPU, which on a loaded machine took longer than
    /// a hundred exchanges back to back (the test failed 5 runs in 10 with every core busy):
    /// the exchanges go on, a millisecond apart so that the worker can run, for up to ten
    /// seconds.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_answer_is_timed_at_its_arrival_not_at_the_proxys_read() {
        let (mut proxy_end, stamps, mut upstream_end) = pair().await;
        let mut late_by = Vec::new();
        let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(1)).await;
            stamps.start();
            proxy_end
                .write_all(b"GET / HTTP/1.1\r\n\r\n")
                .await
                .expect("write");
            let mut request = [0; 18];
            upstream_end
                .read_exact(&mut request)
                .expect("read the request");
            upstream_end
                .write_all(b"HTTP/1.1 200 OK\r\n")
                .expect("answer");
            // Readable: the answer is in the socket, its receive time taken. Whatever the
            // proxy does from here is its own delay.
            proxy_end.tcp.readable().await.expect("readable");
            let arrived_by = wall_clock();
            let mut answer = [0; 17];
            proxy_end
                .read_exact(&mut answer)
                .await
                .expect("read the answer");
            let measured = stamps.upstream_time().expect("measured");
            let ended = stamps.written.load(Ordering::Relaxed)
                + u64::try_from(measured.as_nanos()).expect("small");
            if ended <= arrived_by {
                return;
            }
            late_by.push(ended - arrived_by);
        }
        let last = &late_by[late_by.len().saturating_sub(10)..];
        panic!(
            "all {} samples ended after the answer was in, at the read; the last {last:?} ns late",
            late_by.len()
        );
    }

    /// The size offered to the kernel grows while reads fill it, up to its bound, and falls
    /// back while they bring little, down to its floor.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_read_size_follows_what_reads_bring() {
        let mut size = ReadSize(ReadSize::MIN);
        for _ in 0..30 {
            size = size.next(size.0, size.0);
        }
        assert_eq!(size, ReadSize(ReadSize::MAX));
        assert_eq!(size.next(size.0, size.0 / 2), size, "half used: kept");
        for _ in 0..30 {
            size = size.next(size.0, 100);
        }
        assert_eq!(size, ReadSize(ReadSize::MIN));
    }

    /// A read that brought less than it offered leaves the socket waiting for its next event,
    /// so the read after it does not ask the kernel for bytes that are not there (with the
    /// readiness left set, it did: a `recvmsg` that failed with EAGAIN per exchange).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_read_that_emptied_the_socket_waits_for_the_next_event() {
        let (mut proxy_end, _stamps, mut upstream_end) = pair().await;
        upstream_end
            .write_all(b"HTTP/1.1 200 OK\r\n")
            .expect("answer");
        let mut answer = [0; 64];
        let read = proxy_end.read(&mut answer).await.expect("read");
        assert_eq!(&answer[..read], b"HTTP/1.1 200 OK\r\n");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(
            proxy_end.tcp.poll_read_ready(&mut cx).is_pending(),
            "still marked readable: the next read would find nothing"
        );
        upstream_end.write_all(b"more").expect("more");
        let read = proxy_end.read(&mut answer).await.expect("read");
        assert_eq!(&answer[..read], b"more");
    }

    /// An answer far larger than the first read's size comes through whole, in order.
    #[tokio::test]
    async fn a_large_answer_is_read_whole() {
        let (mut proxy_end, _stamps, mut upstream_end) = pair().await;
        let answer: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let sent = answer.clone();
        let writer = std::thread::spawn(move || upstream_end.write_all(&sent));
        let mut read = vec![0; answer.len()];
        proxy_end.read_exact(&mut read).await.expect("read");
        writer.join().expect("writer").expect("write");
        assert!(read == answer);
    }

    /// A new exchange forgets the last one's stamps, and bytes read before its request was
    /// written (a late end of the last answer) do not time it.
    #[tokio::test]
    async fn each_exchange_is_timed_from_its_own_request() {
        let (mut proxy_end, stamps, mut upstream_end) = pair().await;
        stamps.start();
        assert_eq!(stamps.upstream_time(), None);
        upstream_end.write_all(b"x").expect("stray byte");
        let mut stray = [0; 1];
        proxy_end.read_exact(&mut stray).await.expect("read");
        assert_eq!(stamps.upstream_time(), None, "nothing was written yet");
        proxy_end.write_all(b"request").await.expect("write");
        assert_eq!(stamps.upstream_time(), None, "no answer yet");
        upstream_end.write_all(b"answer").expect("answer");
        let mut answer = [0; 6];
        proxy_end.read_exact(&mut answer).await.expect("read");
        assert!(stamps.upstream_time().is_some());
        stamps.start();
        assert_eq!(stamps.upstream_time(), None);
    }
}
