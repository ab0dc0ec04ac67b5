//! The HTTP server under `hermes-meter ui`, the dashboard tab's backend and
//! `serve --prometheus` (`crates/hermes-meter-runtime/src/http_server.rs`), against clients that
//! misbehave on loopback: many idle connections, a slow sender, a
//! kept-alive connection left idle, one kept past its lifetime, and more
//! connections than the cap. (Running out of descriptors is in
//! `tests/http_fd_exhaustion.rs`: it changes the whole process's limit.)

// libc calls on this process and its children (descriptor limits, exit,
// signals, ownership): the workspace denies unsafe code elsewhere.
#![allow(unsafe_code)]

use hermes_meter_test_support::http_get;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hermes_meter_runtime::http_server::{self, HttpServer, Limits, Reply, HEADER_READ_TIMEOUT, RETRY_AFTER_SECONDS};
use http_body_util::Full;
use http_get::get;

const BIN: &str = env!("CARGO_BIN_EXE_hermes-meter");

/// The idle connections the issue asks the viewer to survive.
const IDLE_CONNECTIONS: usize = 2000;

/// The soft descriptor limit most users start with.
const USUAL_SOFT_LIMIT: u64 = 1024;

/// A server answering `200 ok` to everything, under `limits`.
fn ok_server(limits: Limits) -> HttpServer {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    HttpServer::start_with(listener, "test", limits, |_req| {
        Reply::new(Full::new(Bytes::from_static(b"ok\n")))
    })
    .expect("server starts")
}

fn short(header_read_timeout: Duration, connection_lifetime: Duration, max_connections: usize) -> Limits {
    Limits {
        header_read_timeout,
        connection_lifetime,
        max_connections,
    }
}

fn nofile() -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
    (limit.rlim_cur, limit.rlim_max)
}

fn set_soft_nofile(soft: u64) {
    let (_, hard) = nofile();
    let limit = libc::rlimit {
        rlim_cur: soft.min(hard),
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads only the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

/// Reads from `stream` until the peer closes it or `within` passes;
/// returns when it closed (None: still open) and what arrived.
fn closed_within(stream: &mut TcpStream, within: Duration) -> (Option<Instant>, Vec<u8>) {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return (Some(Instant::now()), got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return (Some(Instant::now()), got),
        }
    }
    (None, got)
}

/// Whether the server still holds `stream` open (nothing to read, no EOF).
fn still_open(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut one = [0u8; 1];
    let open = matches!(stream.peek(&mut one), Err(e) if e.kind() == ErrorKind::WouldBlock);
    stream.set_nonblocking(false).expect("blocking");
    open
}

/// `hermes-meter ui` on a free loopback port, started with the usual soft
/// descriptor limit of 1,024 (what a user's shell gives it).
/// The child's stdout stays open with it: a closed pipe would fail its
/// next line.
fn viewer_binary(home: &std::path::Path) -> (Child, SocketAddr, BufReader<std::process::ChildStdout>) {
    let mut cmd = Command::new(BIN);
    cmd.arg("--home")
        .arg(home)
        .args(["ui", "--listen", "127.0.0.1:0"])
        .env_remove(hermes_meter_runtime::config::cli::UI_TOKEN_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: only setrlimit, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur = USUAL_SOFT_LIMIT.min(limit.rlim_max);
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn hermes-meter ui");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    out.read_line(&mut line).expect("the address line");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (child, addr, out)
}

#[test]
fn a_normal_request_is_answered_within_100_ms_while_2000_idle_connections_are_held() {
    let home = tempfile::tempdir().expect("temp dir");
    drop(hermes_meter_store::Writer::open_dir(home.path()).expect("store"));
    // The viewer lifts its soft limit to the hard one (at most 65,536);
    // its cap is half that. With a low hard limit, hold what it can serve.
    let (_, hard) = nofile();
    let cap = http_server::connection_cap(hard.min(65_536));
    let held_target = IDLE_CONNECTIONS.min(cap.saturating_sub(8));
    if held_target < IDLE_CONNECTIONS {
        eprintln!(
            "the hard descriptor limit is {hard}: holding {held_target} idle connections, not {IDLE_CONNECTIONS}"
        );
    }
    // This process holds the client ends.
    set_soft_nofile(held_target as u64 + 256);
    let (mut child, addr, _out) = viewer_binary(home.path());
    let opened = Instant::now();
    let held: Vec<TcpStream> = (0..held_target)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("idle connection {i}: {e}"))
        })
        .collect();
    // Seconds here would mean the listen queue overflowed and the
    // kernel dropped connections for the client to retry.
    let opening = opened.elapsed();
    assert!(
        opening < HEADER_READ_TIMEOUT / 2,
        "opening {held_target} connections took {opening:?}"
    );
    let mut took: Vec<Duration> = (0..20)
        .map(|_| {
            let start = Instant::now();
            let r = get(addr, "/api/version", &[]);
            assert_eq!(r.status, 200, "{}", r.body);
            start.elapsed()
        })
        .collect();
    took.sort();
    // Within the header-read timeout the server has closed none of them:
    // the answers above were not bought by dropping the idle ones.
    let open = held.iter().filter(|s| still_open(s)).count();
    if opened.elapsed() < HEADER_READ_TIMEOUT {
        assert_eq!(open, held.len(), "the server dropped idle connections");
    }
    drop(held);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        took[18] < Duration::from_millis(100),
        "19 of 20 within 100 ms: {took:?}"
    );
    assert!(took[19] < Duration::from_secs(2), "the slowest: {took:?}");
}

#[test]
fn a_slow_client_sending_a_byte_a_second_is_disconnected_after_the_header_read_timeout() {
    let timeout = Duration::from_secs(2);
    let server = ok_server(short(timeout, Duration::from_secs(60), 64));
    let mut stream = TcpStream::connect(server.addr()).expect("connect");
    let mut writer = stream.try_clone().expect("clone");
    let request = format!("GET / HTTP/1.1\r\nHost: {}\r\nUser-Agent: slow\r\n\r\n", server.addr());
    let started = Instant::now();
    let sender = std::thread::spawn(move || {
        let mut sent = 0;
        for b in request.bytes() {
            if writer.write_all(&[b]).is_err() {
                break;
            }
            sent += 1;
            // The client's pace, not a wait for the server.
            std::thread::sleep(Duration::from_secs(1));
        }
        sent
    });
    let (closed, got) = closed_within(&mut stream, Duration::from_secs(15));
    let closed = closed.expect("the slow client was never disconnected");
    let after = closed.duration_since(started);
    assert!(after >= timeout, "closed before the timeout: {after:?}");
    assert!(after < timeout + Duration::from_secs(3), "closed late: {after:?}");
    assert!(!String::from_utf8_lossy(&got).contains(" 200 "), "it was answered");
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let sent = sender.join().expect("sender");
    assert!(sent < 20, "the headers got through: {sent} bytes");
}

#[test]
fn a_connection_that_sends_nothing_or_goes_idle_after_an_answer_is_closed() {
    let timeout = Duration::from_millis(800);
    let server = ok_server(short(timeout, Duration::from_secs(60), 64));
    let mut silent = TcpStream::connect(server.addr()).expect("connect");
    let mut kept = TcpStream::connect(server.addr()).expect("connect");
    write!(kept, "GET / HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr()).expect("send");
    let start = Instant::now();
    let (silent_closed, _) = closed_within(&mut silent, Duration::from_secs(10));
    let (kept_closed, got) = closed_within(&mut kept, Duration::from_secs(10));
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "answered first"
    );
    for (what, closed) in [("silent", silent_closed), ("kept-alive", kept_closed)] {
        let after = closed
            .unwrap_or_else(|| panic!("the {what} connection stayed open"))
            .duration_since(start);
        assert!(
            after >= timeout - Duration::from_millis(50),
            "{what} closed early: {after:?}"
        );
    }
}

#[test]
fn a_busy_connection_is_closed_after_its_lifetime() {
    let lifetime = Duration::from_secs(1);
    let server = ok_server(short(Duration::from_secs(10), lifetime, 64));
    let mut stream = TcpStream::connect(server.addr()).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let start = Instant::now();
    let deadline = start + Duration::from_secs(10);
    let mut answers = 0;
    let mut buf = [0u8; 4096];
    // Request after request on one kept-alive connection: never idle.
    let closed_at = loop {
        assert!(Instant::now() < deadline, "the connection outlived its lifetime");
        if write!(stream, "GET / HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr()).is_err() {
            break Instant::now();
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break Instant::now(),
            Ok(_) => answers += 1,
        }
    };
    assert!(answers > 1, "kept alive before: {answers} answers");
    assert!(closed_at.duration_since(start) >= lifetime);
}

#[test]
fn past_the_connection_cap_a_client_is_answered_503_with_retry_after_and_connection_close() {
    let cap = 16;
    let server = ok_server(short(Duration::from_secs(30), Duration::from_secs(60), cap));
    let held: Vec<TcpStream> = (0..cap)
        .map(|_| TcpStream::connect(server.addr()).expect("connect"))
        .collect();
    // The held ones are accepted in order; poll until one more is refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let r = get(server.addr(), "/", &[]);
        if r.status == 503 {
            break r;
        }
        assert!(Instant::now() < deadline, "never refused past the cap: {}", r.status);
    };
    assert_eq!(refused.header("connection"), Some("close"));
    assert_eq!(
        refused.header("retry-after"),
        Some(RETRY_AFTER_SECONDS.to_string().as_str())
    );
    // Free the slots: answered again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(server.addr(), "/", &[]).status != 200 {
        assert!(
            Instant::now() < deadline,
            "never answered again once the slots were free"
        );
    }
}

#[test]
fn the_default_limits_are_the_documented_constants() {
    let limits = Limits::default();
    assert_eq!(limits.header_read_timeout, HEADER_READ_TIMEOUT);
    assert_eq!(limits.connection_lifetime, http_server::CONNECTION_LIFETIME);
    assert_eq!(
        limits.max_connections,
        http_server::connection_cap(http_server::open_file_limit())
    );
}
