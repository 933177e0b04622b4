//! A fault-injection TCP proxy for the end-to-end tests: it sits between the operator and the real
//! kube-apiserver (TLS passes through untouched, it only moves bytes) and breaks the network the way
//! real networks break, silently.
//!
//! What each fault models:
//! - **Freeze** ([`FaultProxy::freeze_existing`], [`FaultProxy::freeze_all`]): a dead peer, a black
//!   hole, a cut-off node. Nothing is delivered either way, no FIN, no RST. The proxy keeps reading
//!   into a bounded hold (4 MiB per direction, then TCP flow control pushes back): those bytes stand
//!   for data still unacknowledged in the sender's kernel. So a sender that **resets** its connection
//!   while frozen loses them (they are discarded and counted), as an RST drops a socket's unsent
//!   data; a sender that closes **gracefully** still has them delivered on heal, then a FIN, as TCP
//!   retransmits after a FIN, unless it resets after closing (a process that exits with SO_LINGER
//!   0 does), which drops them too.
//! - **Heal** ([`FaultProxy::heal`]): held bytes are delivered in order, then relaying goes on.
//! - **Reset** ([`FaultProxy::reset_all`]): both ends of every open connection get an RST.
//! - **Latency** ([`FaultProxy::set_latency`]): each chunk is delivered that long after it was read,
//!   order kept, in both directions.
//! - **Resets not forwarded** ([`FaultProxy::forward_no_resets`]): a proxy, load balancer or HA
//!   apiserver peer that has taken a request keeps it when the operator gives up on it. What the
//!   operator sent is delivered to the apiserver on time even after the operator reset or closed
//!   its side, and the apiserver's side stays open (no FIN, which would cancel the request) until
//!   the apiserver closes it; its answers are read and dropped.
//!
//! The proxy runs on a thread and runtime of its own, so that it keeps working whatever the test's
//! runtime does (a current-thread test runtime blocked in a synchronous helper, say); its controls
//! are plain methods callable from any thread. Dropping it closes everything.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// Most bytes held per direction of a frozen connection before the proxy stops reading.
const HOLD: usize = 4 << 20;

/// How often a closed sender with bytes still held is checked for a reset.
const RESET_CHECK: Duration = Duration::from_millis(50);

/// The faults in force.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Faults {
    /// Connections with an id below this are frozen (`u64::MAX`: every connection, new ones too).
    frozen_below: u64,
    latency: Duration,
    /// Bumped by every `reset_all`.
    resets: u64,
    /// The operator's resets and closes are not passed on ([`FaultProxy::forward_no_resets`]).
    keep_requests: bool,
    /// The proxy is being dropped.
    stopping: bool,
}

impl Faults {
    fn frozen(&self, id: u64) -> bool {
        id < self.frozen_below
    }
}

/// What the tests read back.
#[derive(Clone, Debug, Default)]
pub struct ProxyStats {
    pub accepted: u64,
    pub open: u64,
    /// Bytes written to the apiserver side.
    pub upstream_bytes: u64,
    /// Bytes written to the operator side.
    pub downstream_bytes: u64,
    /// Held bytes dropped because their sender reset the connection (or it was reset).
    pub discarded_bytes: u64,
    /// Wall time of the last byte written to the apiserver side.
    pub last_upstream_delivery: Option<SystemTime>,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    open: AtomicU64,
    upstream: AtomicU64,
    downstream: AtomicU64,
    discarded: AtomicU64,
    /// Microseconds since the epoch, 0 for never.
    last_upstream_us: AtomicU64,
}

struct Shared {
    faults: watch::Sender<Faults>,
    counters: Counters,
    next_id: AtomicU64,
}

/// A running proxy; see the module documentation.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (faults, _) = watch::channel(Faults::default());
        let shared = Arc::new(Shared {
            faults,
            counters: Counters::default(),
            next_id: AtomicU64::new(0),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let inner = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Ok(listener) = TcpListener::from_std(listener) {
                        accept(listener, upstream, inner).await;
                    }
                });
                // Dropping the runtime cancels every connection task, closing its sockets.
            })?;
        Ok(FaultProxy {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn change(&self, f: impl FnOnce(&mut Faults)) {
        self.shared.faults.send_modify(f);
    }

    /// Connections open now stop moving bytes both ways; new connections still flow.
    pub fn freeze_existing(&self) {
        let below = self.shared.next_id.load(Ordering::SeqCst);
        self.change(|f| f.frozen_below = f.frozen_below.max(below));
    }

    /// Every connection, including those accepted from now on, stops moving bytes.
    pub fn freeze_all(&self) {
        self.change(|f| f.frozen_below = u64::MAX);
    }

    /// Ends every freeze and every latency; held bytes are delivered in order.
    pub fn heal(&self) {
        self.change(|f| {
            f.frozen_below = 0;
            f.latency = Duration::ZERO;
        });
    }

    /// Resets (RST) both ends of every open connection.
    pub fn reset_all(&self) {
        self.change(|f| f.resets += 1);
    }

    /// Delivers every chunk `d` after it was read, both ways (`Duration::ZERO`: at once).
    pub fn set_latency(&self, d: Duration) {
        self.change(|f| f.latency = d);
    }

    /// From now on, what the operator sent reaches the apiserver even if the operator resets or
    /// closes its side first, and the apiserver's side is not closed after it.
    pub fn forward_no_resets(&self) {
        self.change(|f| f.keep_requests = true);
    }

    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        let last = c.last_upstream_us.load(Ordering::Relaxed);
        ProxyStats {
            accepted: c.accepted.load(Ordering::Relaxed),
            open: c.open.load(Ordering::Relaxed),
            upstream_bytes: c.upstream.load(Ordering::Relaxed),
            downstream_bytes: c.downstream.load(Ordering::Relaxed),
            discarded_bytes: c.discarded.load(Ordering::Relaxed),
            last_upstream_delivery: (last > 0).then(|| UNIX_EPOCH + Duration::from_micros(last)),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.change(|f| f.stopping = true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut faults = shared.faults.subscribe();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
                    shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(connection(id, client, upstream, shared.clone()));
                }
                // Out of descriptors or the like: let the backlog wait rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            changed = faults.changed() => {
                if changed.is_err() || faults.borrow().stopping {
                    return;
                }
            }
        }
    }
}

/// How one direction ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Its sender closed, everything was delivered, and the receiver got a FIN.
    Closed,
    /// Its sender reset, or the receiver could not be written: the connection is dead.
    Reset,
}

async fn connection(id: u64, client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    let counters = &shared.counters;
    let (mut client, mut server) = match TcpStream::connect(upstream).await {
        Ok(server) => (client, server),
        Err(_) => {
            let _ = client.set_zero_linger();
            return;
        }
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    counters.open.fetch_add(1, Ordering::Relaxed);
    let mut faults = shared.faults.subscribe();
    let resets = faults.borrow().resets;
    let reset = {
        // Borrowed halves: dropping them sends nothing (owned write halves would send a FIN).
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        let up = pump(id, &mut client_read, &mut server_write, true, &shared);
        let down = pump(id, &mut server_read, &mut client_write, false, &shared);
        tokio::pin!(up, down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            if up_done && down_done {
                break false;
            }
            tokio::select! {
                end = &mut up, if !up_done => {
                    if end == End::Reset {
                        break true;
                    }
                    up_done = true;
                }
                end = &mut down, if !down_done => {
                    if end == End::Reset {
                        break true;
                    }
                    down_done = true;
                    // The apiserver closed: whatever is still held for it cannot be delivered.
                    if faults.borrow().keep_requests {
                        break false;
                    }
                }
                changed = faults.changed() => {
                    let f = *faults.borrow();
                    if changed.is_err() || f.stopping || f.resets != resets {
                        break true;
                    }
                }
            }
        }
    };
    if reset {
        let _ = (client.set_zero_linger(), server.set_zero_linger());
    }
    drop((client, server));
    counters.open.fetch_sub(1, Ordering::Relaxed);
}

/// Moves bytes one way, obeying the faults: holds while frozen, delays by the latency.
async fn pump(
    id: u64,
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    upstream: bool,
    shared: &Shared,
) -> End {
    let counters = &shared.counters;
    let mut faults = shared.faults.subscribe();
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut held = 0usize;
    let mut eof = false;
    // The operator's side is gone, and the proxy keeps requests: answers are read and dropped.
    let mut dropping = false;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let f = *faults.borrow_and_update();
        if eof && queue.is_empty() {
            if upstream && f.keep_requests {
                // No FIN to the apiserver: it would cancel the request just delivered.
                return std::future::pending().await;
            }
            let _ = to.shutdown().await;
            return End::Closed;
        }
        let due = match queue.front() {
            Some((read_at, _)) if !f.frozen(id) => Some(*read_at + f.latency),
            _ => None,
        };
        tokio::select! {
            read = from.read(&mut buf), if !eof && held < HOLD => match read {
                Ok(0) => eof = true,
                Ok(n) => {
                    held += n;
                    queue.push_back((Instant::now(), buf[..n].to_vec()));
                }
                Err(_) if upstream && f.keep_requests => eof = true,
                Err(_) => {
                    counters.discarded.fetch_add(held as u64, Ordering::Relaxed);
                    return End::Reset;
                }
            },
            // A sender that closed (FIN) and then reset (RST) drops what it had not got
            // acknowledged, as a kernel purges a reset socket's send queue: past its FIN a read
            // says nothing more, so look at the socket's error instead.
            () = tokio::time::sleep(RESET_CHECK), if eof && !queue.is_empty() && !(upstream && f.keep_requests) => {
                let reset: &TcpStream = from.as_ref();
                if let Ok(Some(_)) = reset.take_error() {
                    counters.discarded.fetch_add(held as u64, Ordering::Relaxed);
                    return End::Reset;
                }
            },
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                let Some((_, chunk)) = queue.pop_front() else { continue };
                held -= chunk.len();
                if dropping {
                    counters.discarded.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    continue;
                }
                if to.write_all(&chunk).await.is_err() {
                    if !upstream && f.keep_requests {
                        dropping = true;
                        counters.discarded.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        continue;
                    }
                    counters.discarded.fetch_add((held + chunk.len()) as u64, Ordering::Relaxed);
                    return End::Reset;
                }
                let n = chunk.len() as u64;
                if upstream {
                    counters.upstream.fetch_add(n, Ordering::Relaxed);
                    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                    counters.last_upstream_us.store(now.as_micros() as u64, Ordering::Relaxed);
                } else {
                    counters.downstream.fetch_add(n, Ordering::Relaxed);
                }
            },
            changed = faults.changed() => {
                if changed.is_err() {
                    return End::Reset;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Resets a socket: SO_LINGER {on, 0}, so that closing its last descriptor sends an RST and drops
    /// what it had not sent.
    fn abort(socket: &std::net::TcpStream) {
        let _ = zero_linger(socket);
    }

    fn zero_linger(socket: &std::net::TcpStream) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on a descriptor we own, with a correctly sized `linger` value.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// A local server: echoes what it reads, and records everything it received.
    struct Echo {
        addr: SocketAddr,
        received: Arc<std::sync::Mutex<Vec<u8>>>,
        eofs: Arc<AtomicU64>,
    }

    fn echo() -> Echo {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(std::sync::Mutex::new(Vec::new()));
        let eofs = Arc::new(AtomicU64::new(0));
        let (r, e) = (received.clone(), eofs.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let (r, e) = (r.clone(), e.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) => {
                                e.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                            Ok(n) => {
                                r.lock().unwrap().extend_from_slice(&buf[..n]);
                                if s.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                            Err(_) => return,
                        }
                    }
                });
            }
        });
        Echo {
            addr,
            received,
            eofs,
        }
    }

    fn connect(proxy: &FaultProxy) -> std::net::TcpStream {
        let s = std::net::TcpStream::connect(proxy.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        s
    }

    /// Reads exactly `n` bytes, or what arrived before the read timeout.
    fn read_n(s: &mut std::net::TcpStream, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match s.read(&mut out[got..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => got += k,
            }
        }
        out.truncate(got);
        out
    }

    fn round_trip(s: &mut std::net::TcpStream, msg: &[u8]) -> Vec<u8> {
        s.write_all(msg).unwrap();
        read_n(s, msg.len())
    }

    #[tokio::test]
    async fn bytes_flow_both_ways() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        let mut s = connect(&p);
        assert_eq!(round_trip(&mut s, b"hello"), b"hello");
        // A chunk is counted once its write returned, which may be after the client read it.
        let mut stats = p.stats();
        for _ in 0..100 {
            if stats.downstream_bytes == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            stats = p.stats();
        }
        assert_eq!((stats.upstream_bytes, stats.downstream_bytes), (5, 5));
        assert!(stats.last_upstream_delivery.is_some());
    }

    #[tokio::test]
    async fn a_freeze_holds_existing_connections_while_new_ones_flow_and_heal_delivers_in_order() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        let mut old = connect(&p);
        assert_eq!(round_trip(&mut old, b"a"), b"a");
        p.freeze_existing();
        old.write_all(b"bc").unwrap();
        old.write_all(b"de").unwrap();
        assert!(
            read_n(&mut old, 4).is_empty(),
            "nothing passes while frozen"
        );
        let mut new = connect(&p);
        assert_eq!(round_trip(&mut new, b"new"), b"new");
        p.heal();
        old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(read_n(&mut old, 4), b"bcde");
    }

    #[tokio::test]
    async fn freeze_all_holds_new_connections_too() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        p.freeze_all();
        let mut s = connect(&p);
        s.write_all(b"x").unwrap();
        assert!(read_n(&mut s, 1).is_empty());
        p.heal();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(read_n(&mut s, 1), b"x");
    }

    #[tokio::test]
    async fn reset_all_resets_both_ends() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        let mut s = connect(&p);
        assert_eq!(round_trip(&mut s, b"x"), b"x");
        p.reset_all();
        std::thread::sleep(Duration::from_millis(200));
        let mut buf = [0u8; 1];
        let read = s.read(&mut buf);
        assert!(
            matches!(&read, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
            "{read:?}"
        );
        // The server side saw its connection end too (an RST ends its read with an error, not EOF).
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while p.stats().open > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(p.stats().open, 0);
    }

    #[tokio::test]
    async fn a_sender_that_resets_while_frozen_loses_its_held_bytes() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        let mut s = connect(&p);
        assert_eq!(round_trip(&mut s, b"before"), b"before");
        p.freeze_existing();
        s.write_all(b"never delivered").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        abort(&s);
        drop(s);
        std::thread::sleep(Duration::from_millis(200));
        p.heal();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(e.received.lock().unwrap().as_slice(), b"before");
        assert_eq!(p.stats().discarded_bytes, 15);
    }

    #[tokio::test]
    async fn a_sender_that_closes_gracefully_while_frozen_is_delivered_then_closed() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        let mut s = connect(&p);
        assert_eq!(round_trip(&mut s, b"a"), b"a");
        p.freeze_existing();
        s.write_all(b"late").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(e.received.lock().unwrap().as_slice(), b"a");
        p.heal();
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while e.eofs.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(e.received.lock().unwrap().as_slice(), b"alate");
        assert_eq!(e.eofs.load(Ordering::SeqCst), 1, "then the FIN");
    }

    #[tokio::test]
    async fn a_sender_that_closes_then_resets_while_frozen_loses_its_held_bytes() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        let mut s = connect(&p);
        assert_eq!(round_trip(&mut s, b"a"), b"a");
        p.freeze_existing();
        s.write_all(b"abandoned").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        abort(&s);
        drop(s);
        std::thread::sleep(Duration::from_millis(300));
        p.heal();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(e.received.lock().unwrap().as_slice(), b"a");
        assert_eq!(p.stats().discarded_bytes, 9);
    }

    #[tokio::test]
    async fn latency_delays_each_way() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        p.set_latency(Duration::from_millis(300));
        let mut s = connect(&p);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t = std::time::Instant::now();
        assert_eq!(round_trip(&mut s, b"slow"), b"slow");
        assert!(
            t.elapsed() >= Duration::from_millis(600),
            "{:?}",
            t.elapsed()
        );
    }

    #[tokio::test]
    async fn a_proxy_that_keeps_requests_delivers_them_after_the_sender_reset_and_sends_no_fin() {
        let e = echo();
        let p = FaultProxy::start(e.addr).await.unwrap();
        let mut s = connect(&p);
        assert_eq!(round_trip(&mut s, b"a"), b"a");
        p.forward_no_resets();
        p.set_latency(Duration::from_millis(400));
        s.write_all(b"abandoned").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        abort(&s);
        drop(s);
        std::thread::sleep(Duration::from_millis(800));
        assert_eq!(e.received.lock().unwrap().as_slice(), b"aabandoned");
        assert_eq!(e.eofs.load(Ordering::SeqCst), 0, "no FIN to the server");
        // The echo's answer had nowhere to go: read and dropped.
        assert_eq!(p.stats().discarded_bytes, 9);
    }
}
