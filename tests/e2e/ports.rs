//! Operations: the listening port cannot be starved. An operator held to a container's default
//! of 1,024 file descriptors, flooded with idle connections, stays idle itself, cuts a client that
//! sends half a request header, answers `/readyz` and still makes the series of a new crash loop.

use crate::OPERATOR;
use crate::operator::{count, emit, wait_for};
use anyhow::{Context, Result, bail};
use event_series::operations::server::listener::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
use event_series_test_support::cluster::{TestNamespace, client, kubeconfig};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// `ulimit -n` of the operator: the usual container default.
const NOFILE: u64 = 1024;
/// Idle connections in the flood: more than the operator has descriptors.
const IDLE: usize = 1500;

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit: the flood needs 1,500 descriptors.
fn raise_own_nofile() -> Result<libc::rlim_t> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct passed by reference.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
    }
    Ok(limit.rlim_cur)
}

/// The process's CPU time so far (utime + stime), in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').context("/proc/<pid>/stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64> {
        Ok(fields
            .get(n - 3)
            .context("short /proc/<pid>/stat")?
            .parse()?)
    };
    Ok(field(14)? + field(15)?)
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s times.
fn clk_tck() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// Opens up to `n` idle connections to `addr`: the connections and how many connects timed out. A
/// SYN that finds the backlog full is resent after 1 s; a server that stops accepting leaves every
/// later connect hanging: the flood stops after three timeouts in a row.
fn flood(addr: SocketAddr, n: usize) -> (Vec<TcpStream>, usize) {
    let mut idle = Vec::with_capacity(n);
    let (mut timeouts, mut in_a_row) = (0, 0);
    while idle.len() < n && in_a_row < 3 {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(s) => {
                idle.push(s);
                in_a_row = 0;
            }
            Err(_) => {
                timeouts += 1;
                in_a_row += 1;
            }
        }
    }
    (idle, timeouts)
}

/// Sockets the process holds open.
fn sockets(pid: u32) -> Result<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        if let Ok(target) = std::fs::read_link(entry?.path())
            && target.to_string_lossy().starts_with("socket:")
        {
            n += 1;
        }
    }
    Ok(n)
}

/// The most sockets the process holds while it works through its accept queue, waiting up to
/// `within` for `at_least`: connections the kernel completed are in the backlog until accepted, and
/// a loaded machine may take seconds to accept 256.
fn sockets_reaching(pid: u32, at_least: usize, within: Duration) -> Result<usize> {
    let deadline = Instant::now() + within;
    let mut most = sockets(pid)?;
    while most < at_least && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        most = most.max(sockets(pid)?);
    }
    Ok(most)
}

/// Whether the server still holds this client's connection open (no EOF, no reset).
fn open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte) {
        Err(e) => e.kind() == ErrorKind::WouldBlock,
        Ok(_) => false,
    }
}

/// GET `path` on a fresh connection, everything within `within`: the status code, or why not.
fn get_within(addr: SocketAddr, path: &str, within: Duration) -> Result<u16> {
    let deadline = Instant::now() + within;
    let mut s = TcpStream::connect_timeout(&addr, within)?;
    s.set_read_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no status line in {text:?}"))
}

/// Blocks until the server closes `stream` or `limit` passes: how long that took, `None` if never.
fn time_to_close(mut stream: TcpStream, since: Instant, limit: Duration) -> Option<Duration> {
    let mut buf = [0u8; 1024];
    loop {
        let left = limit.checked_sub(since.elapsed())?;
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match stream.read(&mut buf) {
            Ok(0) => return Some(since.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(since.elapsed()),
        }
    }
}

/// With a container's 1,024 descriptors, the connection cap keeps the operator from running out: a
/// flood of 1,500 idle connections costs it at most the cap, no CPU, and no probe or series.
#[tokio::test]
async fn a_flood_of_idle_connections_cannot_starve_the_port() -> Result<()> {
    let own = raise_own_nofile()?;
    if own < (IDLE + 100) as libc::rlim_t {
        bail!(
            "this test needs {} descriptors, its hard limit is {own}",
            IDLE + 100
        );
    }
    let client = client().await?;
    let ns = TestNamespace::new(&client, "ports").await?;
    let op = OPERATOR.launch_with(
        kubeconfig(),
        &ns.name,
        &[
            "--namespace",
            &ns.name,
            "--finish-after",
            "20s",
            "--series-window",
            "20s",
        ],
        Some(NOFILE),
    )?;
    let pid = op.pid();
    // The port the kubelet probes.
    let addr: SocketAddr = op.health.trim_start_matches("http://").parse()?;
    let clk_tck = clk_tck();

    // The flood: idle connections that never send a byte, then one that sends half a header.
    let flood_started = Instant::now();
    let flood_ticks = cpu_ticks(pid)?;
    let (idle, timeouts) = flood(addr, IDLE);
    let slow = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).and_then(|mut s| {
        s.write_all(b"GET /readyz HTTP/1.1\r\nHo")?;
        Ok(s)
    });
    let slow_sent = Instant::now();
    println!(
        "flood: {} idle connections open in {:?} ({timeouts} connects timed out, operator CPU {:.2} s), half-header client: {}",
        idle.len(),
        flood_started.elapsed(),
        (cpu_ticks(pid)? - flood_ticks) as f64 / clk_tck,
        match &slow {
            Ok(_) => "sent".to_owned(),
            Err(e) => format!("not connected ({e})"),
        }
    );
    let watch_limit = HEADER_READ_TIMEOUT + Duration::from_secs(5);
    let slow_cut = std::thread::spawn(move || {
        slow.ok()
            .and_then(|s| time_to_close(s, slow_sent, watch_limit))
    });

    // A new crash loop during the flood.
    let storm_ns = ns.name.clone();
    let storm = std::thread::spawn(move || {
        emit(
            &storm_ns,
            &[
                "--recorder",
                "legacy",
                "--scenario",
                "crashloop",
                "--pods",
                "1",
                "--rate",
                "5",
                "--count",
                "10",
            ],
        )
    });

    // 10 s of CPU while flooded; within it, what the server holds and whether /readyz answers.
    let window = Instant::now();
    let ticks = cpu_ticks(pid)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = sockets(pid)?;
    for s in &idle {
        s.set_nonblocking(true)?;
    }
    let still_open = idle.iter().filter(|s| open(s)).count();
    let probe = Instant::now();
    let readyz = get_within(addr, "/readyz", Duration::from_secs(5));
    let probe_took = probe.elapsed();
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(window.elapsed())).await;
    let cpu = (cpu_ticks(pid)? - ticks) as f64 / clk_tck / window.elapsed().as_secs_f64() * 100.0;
    println!(
        "operator CPU while flooded: {cpu:.1}% of one core over {:?}",
        window.elapsed()
    );
    println!(
        "held 1 s into the flood: {held} sockets in the operator, {still_open} of {} idle client connections still open",
        idle.len()
    );
    println!("/readyz during the flood: {readyz:?} in {probe_took:?}");

    let slow_cut = match slow_cut.join() {
        Ok(t) => t,
        Err(_) => bail!("the slow client's thread panicked"),
    };
    println!(
        "half-header client cut after {slow_cut:?} (deadline {HEADER_READ_TIMEOUT:?}, watched {watch_limit:?})"
    );

    let truth = match storm.join() {
        Ok(t) => t?,
        Err(_) => bail!("the emitter thread panicked"),
    };
    let total: u64 = truth.iter().map(|t| t.api_count).sum();
    let series = wait_for(
        &client,
        &ns.name,
        "the new crash loop's series with the API's count",
        |objs| objs.len() == 1 && objs.iter().map(count).sum::<u64>() == total,
    )
    .await;
    println!(
        "new crash loop ({total} occurrences): {}",
        match &series {
            Ok(_) => "series object made".to_owned(),
            Err(e) => format!("{e:#}"),
        }
    );
    drop(idle);

    assert!(
        cpu < 30.0,
        "operator CPU while flooded: {cpu:.1}% of one core"
    );
    assert!(
        slow_cut.is_some_and(|t| t <= HEADER_READ_TIMEOUT + Duration::from_secs(2)),
        "half-header client cut after {slow_cut:?}, deadline {HEADER_READ_TIMEOUT:?}"
    );
    assert_eq!(readyz.ok(), Some(200), "/readyz during the flood");
    assert!(
        still_open <= MAX_CONNECTIONS + 1,
        "{still_open} idle connections held, cap {MAX_CONNECTIONS}"
    );
    series?;
    drop(op);
    ns.cleanup().await
}

/// Descriptors below the connection cap: the flood does exhaust them. Accept then closes the oldest
/// connection to free one instead of spinning, so a probe queued behind the flood is still served.
#[tokio::test]
async fn out_of_descriptors_the_server_frees_one_instead_of_spinning() -> Result<()> {
    const FEW: u64 = 128;
    raise_own_nofile()?;
    let client = client().await?;
    let ns = TestNamespace::new(&client, "ports_emfile").await?;
    let op = OPERATOR.launch_with(
        kubeconfig(),
        &ns.name,
        &["--namespace", &ns.name],
        Some(FEW),
    )?;
    let pid = op.pid();
    // The flood on the metrics port; the probe on the health port: the two servers share one
    // table of connections, so the health server frees a descriptor the metrics flood holds.
    let addr: SocketAddr = op.metrics.trim_start_matches("http://").parse()?;
    let probe_addr: SocketAddr = op.health.trim_start_matches("http://").parse()?;
    let (idle, timeouts) = flood(addr, 2 * FEW as usize);
    let held = sockets_reaching(pid, (FEW - 32) as usize, Duration::from_secs(15))?;

    let ticks = cpu_ticks(pid)?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu = (cpu_ticks(pid)? - ticks) as f64 / clk_tck() / 5.0 * 100.0;
    let probe = Instant::now();
    let readyz = get_within(probe_addr, "/readyz", Duration::from_secs(5));
    let probe_took = probe.elapsed();
    println!(
        "out of descriptors (RLIMIT_NOFILE {FEW}): {} idle connections open ({timeouts} connects timed out), \
         {held} sockets in the operator; CPU {cpu:.1}% of one core over 5 s; /readyz {readyz:?} in {probe_took:?}",
        idle.len()
    );
    drop(idle);
    assert!(
        held as u64 >= FEW - 32,
        "the flood did not exhaust the descriptors: {held} sockets"
    );
    assert!(
        cpu < 30.0,
        "operator CPU out of descriptors: {cpu:.1}% of one core"
    );
    assert_eq!(readyz.ok(), Some(200), "/readyz out of descriptors");
    drop(op);
    ns.cleanup().await
}
