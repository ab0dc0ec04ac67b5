//! Ledger benchmark: per-event apply latency (transaction included) and
//! replay throughput, on the recorded fixtures with ids rewritten so every
//! event is new.
//!
//! Run: `cargo bench --bench ledger` (`-- --events N` for more events,
//! `-- --only apply`, `-- --only replay`, `-- --only batch` or `-- --only
//! floor` for one part). `floor` is what SQLite alone costs here: a
//! transaction that inserts one row into a bare table, with the store's
//! pragmas and VFS (and with SQLite's default VFS, for comparison), which
//! no event's apply can beat.

use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use hermes_meter_model::hook::{decode, DecodeOptions, Decoded, HookEvent};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::{EventContext, Writer};

// The size benchmark's copies shift time too; this one's do not.
#[allow(dead_code)]
use hermes_meter_test_support::stream;
use stream::fixture_lines;

/// Copy `i` of every fixture line, with session ids (which every other id
/// embeds) and times made unique.
fn copy(lines: &[String], i: usize) -> impl Iterator<Item = String> + '_ {
    let stamp = format!("{:08}_", 10_000_000 + i);
    lines.iter().map(move |l| l.replace("20261130_", &stamp))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events: usize = args
        .iter()
        .position(|a| a == "--events")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        // `cargo bench` passes --bench; anything else (cargo test --benches)
        // gets a smoke run.
        .unwrap_or(if args.iter().any(|a| a == "--bench") {
            100_000
        } else {
            2_000
        });
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let lines = fixture_lines();
    let dir = tempfile::tempdir().expect("temp dir");
    if only.is_none() || only.as_deref() == Some("apply") {
        bench_apply(&lines, dir.path(), events);
    }
    if only.is_none() || only.as_deref() == Some("replay") {
        bench_replay(&lines, dir.path(), events);
    }
    if only.is_none() || only.as_deref() == Some("batch") {
        bench_batch(&lines, dir.path(), events);
    }
    if only.is_none() || only.as_deref() == Some("floor") {
        bench_floor(dir.path(), events);
    }
}

/// One-row transactions into a table with no index (one page written) and
/// into one with a unique text key (two pages), on a connection opened as
/// the store opens it.
fn bench_floor(dir: &Path, events: usize) {
    let path = dir.join("floor.db");
    let conn = hermes_meter_store::connect(&path).expect("open");
    conn.execute_batch(
        "CREATE TABLE one (id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE two (id INTEGER PRIMARY KEY, k TEXT UNIQUE, v TEXT);",
    )
    .expect("tables");
    let value = "x".repeat(200);
    for (label, sql) in [
        ("1 page", "INSERT INTO one (v) VALUES (?2)"),
        ("2 pages", "INSERT INTO two (k, v) VALUES (?1, ?2)"),
    ] {
        let mut micros = Vec::with_capacity(events);
        for n in 0..events {
            let t0 = Instant::now();
            conn.execute_batch("BEGIN").expect("begin");
            conn.prepare_cached(sql)
                .expect("prepare")
                .execute(rusqlite::params![format!("{n:012}"), value])
                .expect("insert");
            conn.execute_batch("COMMIT").expect("commit");
            micros.push(t0.elapsed().as_secs_f64() * 1e6);
            if n % 1_000 == 999 {
                conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    .expect("checkpoint");
            }
        }
        micros.sort_by(f64::total_cmp);
        println!(
            "SQLite floor, one-row transaction ({label}): p50 {:.1} µs  p99 {:.1} µs",
            hermes_meter_test_support::percentile(&micros, 0.5),
            hermes_meter_test_support::percentile(&micros, 0.99)
        );
    }
}

/// Decoded events, `events` of them, copies of the fixtures with fresh ids.
fn decoded_events(lines: &[String], events: usize, first_copy: usize) -> Vec<HookEvent> {
    let mut decoded = Vec::with_capacity(events);
    let mut i = first_copy;
    while decoded.len() < events {
        for (n, line) in copy(lines, i).enumerate() {
            let rec = hermes_meter_model::hook::parse_line(&line, false)
                .expect("line")
                .expect("record");
            let at = rec.t.unwrap_or(0.0) + i as f64 * 1000.0 + n as f64 * 1e-6;
            if let Decoded::Event(e, _) = decode(&rec.hook, &rec.kwargs, at, DecodeOptions::default()) {
                decoded.push(e);
            }
        }
        i += 1;
    }
    decoded.truncate(events);
    decoded
}

/// Group commit: already-decoded events applied 256 to a transaction, what
/// the bridge's writer thread does under load.
fn bench_batch(lines: &[String], dir: &Path, events: usize) {
    let decoded = decoded_events(lines, events, 200_000);
    let mut store = Writer::open(&dir.join("batch.db")).expect("open");
    let ctx = EventContext::default();
    let t0 = Instant::now();
    for chunk in decoded.chunks(256) {
        store.apply_batch(chunk.iter().map(|e| (e, &ctx))).expect("apply batch");
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "group commit, 256 events a transaction: {:.0} events/s ({:.1} µs an event)",
        events as f64 / secs,
        secs * 1e6 / events as f64
    );
}

fn bench_apply(lines: &[String], dir: &Path, events: usize) {
    // Per-event latency: decode outside the timer, apply (one transaction each) inside.
    let mut store = Writer::open(&dir.join("apply.db")).expect("open");
    let decoded = decoded_events(lines, events, 0);
    let ctx = EventContext::default();
    let mut micros = Vec::with_capacity(events);
    for (n, e) in decoded.iter().enumerate() {
        let t0 = Instant::now();
        store.apply(e, &ctx).expect("apply");
        micros.push(t0.elapsed().as_secs_f64() * 1e6);
        if n % 20_000 == 19_999 {
            // What the bridge's background thread does, outside the timed path.
            store.checkpoint().expect("checkpoint");
        }
    }
    micros.sort_by(f64::total_cmp);
    println!(
        "apply one event (own transaction), {events} events: p50 {:.1} µs  p99 {:.1} µs  p99.9 {:.1} µs  max {:.0} µs",
        hermes_meter_test_support::percentile(&micros, 0.5),
        hermes_meter_test_support::percentile(&micros, 0.99),
        hermes_meter_test_support::percentile(&micros, 0.999),
        micros[micros.len() - 1]
    );
}

/// Replay throughput: a JSON-lines file of `events` records, parse + decode + apply.
fn bench_replay(lines: &[String], dir: &Path, events: usize) {
    let path = dir.join("replay.jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    let mut written = 0;
    let mut i = 0;
    while written < events {
        for line in copy(lines, 100_000 + i) {
            writeln!(file, "{line}").expect("write");
            written += 1;
        }
        i += 1;
    }
    // On disk before the clock starts: the kernel writing back the setup's
    // 900 MB during the run is no part of a replay.
    file.into_inner().expect("flush").sync_all().expect("sync");
    let mut store = Writer::open(&dir.join("replay.db")).expect("open");
    let mut stats = ReplayStats::default();
    let t0 = Instant::now();
    replay_file(&mut store, &path, DecodeOptions::default(), &mut stats).expect("replay");
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "replay {} records ({} applied): {:.2} s, {:.0} records/s",
        stats.records,
        stats.applied,
        secs,
        stats.records as f64 / secs
    );
}
