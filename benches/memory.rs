//! Memory benchmark: one long-lived bridge (a gateway process)
//! serves copies of the recorded Hermes stream, fresh ids per copy, through
//! the hook path (`Bridge::submit_line`: spool record, queue, decoded and
//! committed by the writer thread), and prints the process's resident
//! memory as the sessions served grow. Every in-memory map of the bridge
//! has a bound (ARCHITECTURE.md), so the figure flattens once they are
//! full.
//!
//! Run: `cargo bench --bench memory` (20,000 sessions), or
//! `cargo bench --bench memory -- --sessions 100000`.

use std::time::Duration;

use hermes_meter_model::hook::HOOK_NAMES;
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig};
use hermes_meter_store::EventContext;

use hermes_meter_test_support::stream;

/// Resident memory of this process, in MiB (`VmRSS`).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let default = if args.iter().any(|a| a == "--bench") {
        20_000
    } else {
        200
    };
    let sessions: usize = args
        .iter()
        .position(|a| a == "--sessions")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(default);
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(BridgeConfig::new(dir.path().join("meter")));
    let lines = stream::fixture_lines();
    // 19 sessions (runs) a copy of the stream.
    let copies = sessions.div_ceil(19).max(1);
    let now = hermes_meter_store::unix_now();
    let recorded = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["t"].as_f64())
        .fold(0.0, f64::max);
    let start = rss_mib();
    println!("sessions served  RSS MiB (start {start:.1})");
    let report_every = (copies / 10).max(1);
    for copy in 0..copies {
        // Every copy happens now (the recording spans 94 s), as a gateway's
        // sessions come one after another: calls land in the quarter hour
        // being filled, as live calls do, not in one the report rollups
        // already summed (a late call makes its quarter hour be summed
        // again; with every copy late, the bench timed that instead).
        let text = stream::session_copy(&lines, copy + 1, hermes_meter_store::unix_now() - recorded);
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("json line");
            let Some(hook) = HOOK_NAMES.iter().find(|h| v["hook"] == **h) else {
                continue;
            };
            let at = v["t"].as_f64().unwrap_or(now);
            bridge.submit_line(hook, line.as_bytes().to_vec(), at, EventContext::default());
        }
        // A copy is ~200 hook calls of ~9 KB queued lines: let the writer
        // take them before the next, as a gateway's sessions come over
        // time (a burst's queue is memory the allocator keeps as its high
        // water mark, which would hide what the bridge itself holds).
        bridge.flush(Duration::from_secs(60));
        if (copy + 1) % report_every == 0 {
            println!("{:>15}  {:.1}", (copy + 1) * 19, rss_mib());
        }
    }
    let stats = bridge.stats();
    println!(
        "committed {} events, {} failed, {} dropped; RSS {:.1} MiB",
        stats.committed,
        stats.failed,
        stats.dropped,
        rss_mib()
    );
    bridge.shutdown(Duration::from_secs(10));
}
