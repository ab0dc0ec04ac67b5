//! The HTTP server's accept loop when the process has no descriptor left
//! (`EMFILE`): it backs off instead of spinning on the queued connection,
//! and serves it once descriptors are back. Its own test binary, with one
//! test, because it lowers and fills the whole process's descriptor table.

// libc calls on this process and its children (descriptor limits, exit,
// signals, ownership): the workspace denies unsafe code elsewhere.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hermes_meter_runtime::http_server::{HttpServer, Reply};
use http_body_util::Full;

/// The soft limit the test lowers to, so filling the table is quick.
const LOW_SOFT_LIMIT: u64 = 256;

/// How long CPU time is measured while the table is full.
const WINDOW: Duration = Duration::from_secs(1);

fn nofile() -> libc::rlimit {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
    limit
}

fn set_nofile(limit: &libc::rlimit) {
    // SAFETY: setrlimit reads only the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, limit) }, 0);
}

/// User plus system CPU time of this whole process.
fn cpu_time() -> Duration {
    // SAFETY: a zeroed rusage is a valid value; getrusage writes only it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[test]
fn the_accept_loop_backs_off_instead_of_spinning_when_descriptors_run_out() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let server = HttpServer::start(listener, "test", |_req| {
        Reply::new(Full::new(Bytes::from_static(b"ok\n")))
    })
    .expect("server starts");
    let addr = server.addr();
    let mut probe = TcpStream::connect(addr).expect("connect");
    write!(probe, "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut got = String::new();
    probe.read_to_string(&mut got).expect("an answer");
    assert!(got.starts_with("HTTP/1.1 200"), "serving before: {got}");
    drop(probe);

    // Fill the descriptor table under a low limit, then free exactly one
    // for a client: its connection waits in the backlog, and every
    // accept fails with EMFILE.
    let saved = nofile();
    set_nofile(&libc::rlimit {
        rlim_cur: LOW_SOFT_LIMIT.min(saved.rlim_cur),
        rlim_max: saved.rlim_max,
    });
    let mut filler = Vec::new();
    loop {
        // SAFETY: dup of stdin's descriptor; closed below.
        let fd = unsafe { libc::dup(0) };
        if fd < 0 {
            break;
        }
        filler.push(fd);
    }
    let last = filler.pop().expect("at least one descriptor was free");
    // SAFETY: closing a descriptor this test opened.
    unsafe { libc::close(last) };
    let mut client = TcpStream::connect(addr).expect("connect into the backlog");

    let before = cpu_time();
    // A measurement window, not a wait for the server.
    std::thread::sleep(WINDOW);
    let used = cpu_time() - before;

    for fd in filler {
        // SAFETY: closing descriptors this test opened.
        unsafe { libc::close(fd) };
    }
    set_nofile(&saved);
    assert!(
        used < WINDOW / 10,
        "the accept loop used {used:?} of CPU in {WINDOW:?} with no descriptor left"
    );

    // Descriptors are back: the queued connection is served.
    client.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let started = Instant::now();
    write!(client, "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut got = String::new();
    client.read_to_string(&mut got).expect("an answer");
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(started.elapsed() < Duration::from_secs(5), "served late");
}
