//! An alert webhook's receiver on loopback, for the webhook and digest
//! tests: a real HTTP/1.1 server that answers 200 to every POST.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// A loopback HTTP/1.1 receiver answering 200 to every POST, keeping the
/// bodies. It runs until the test process ends.
pub fn receiver(listener: TcpListener) -> Arc<Mutex<Vec<Value>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&got);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).expect("body");
            kept.lock()
                .expect("lock")
                .push(serde_json::from_slice(&body).expect("a JSON body"));
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    got
}
