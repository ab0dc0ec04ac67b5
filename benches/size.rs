//! Size benchmark: fills one store through the real apply path
//! (the replay decoder and `Writer::apply_batch`) with copies of the
//! recorded Hermes stream, fresh ids per copy, spread evenly over a year
//! ending now, and prints per size: store bytes per hook call, the time of
//! `report` (all time, the last day, and every session of the last week
//! as `--json` lists them), `status`, `export --since 1h`, an
//! idle sweep, and retention (with the plugin's default retention): the
//! transactions' times and what the store holds once the backlog is gone;
//! then the viewer's pages and the CLI commands as users run them.
//!
//! Run: `cargo bench --bench size` (10,000 sessions), or
//! `cargo bench --bench size -- --sessions 100000` (and 1000000; the
//! fill takes about a minute per 10,000 sessions in a release build).
//! `-- --keep DIR` keeps the store in DIR; `-- --keep DIR --reuse`
//! measures a store kept before (same `--sessions`) instead of filling
//! one.

use std::path::Path;
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_runtime::bridge::pace::BatchSize;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::{ContentCursor, RetainKind, Writer};

use hermes_meter_test_support::http_get;
use hermes_meter_test_support::stream;

const DAY: f64 = 86_400.0;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes --bench; anything else (cargo test --benches)
    // gets a smoke run.
    let default = if args.iter().any(|a| a == "--bench") {
        10_000
    } else {
        100
    };
    let sessions: usize = arg(&args, "--sessions").and_then(|n| n.parse().ok()).unwrap_or(default);
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = arg(&args, "--keep")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir).expect("store dir");
    let mut store = Writer::open_dir(&dir).expect("open store");
    store.set_cache_size_kib(64 * 1024).expect("cache");

    let lines = stream::fixture_lines();
    let per_copy = sessions_per_copy(&lines);
    let copies = sessions.div_ceil(per_copy).max(1);
    let now = hermes_meter_store::unix_now();
    let recorded: f64 = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["t"].as_f64())
        .fold(0.0, f64::max);
    let runs: i64 = store.query_scalar("SELECT COUNT(*) FROM runs").expect("runs");
    let hook_calls = if args.iter().any(|a| a == "--reuse") && runs > 0 {
        // A store this bench filled before with the same --sessions (its
        // copies hold every line of the stream each).
        println!("reusing {runs} sessions in {}", dir.display());
        (copies * lines.len()) as f64
    } else {
        let t0 = Instant::now();
        let stats = fill(&mut store, &dir, &lines, copies, recorded, now);
        let fill_secs = t0.elapsed().as_secs_f64();
        let runs: i64 = store.query_scalar("SELECT COUNT(*) FROM runs").expect("runs");
        println!(
            "filled {runs} sessions, {} hook calls ({} applied) in {fill_secs:.1} s",
            stats.records, stats.applied
        );
        stats.records as f64
    };
    store.checkpoint().expect("checkpoint");
    let before = bytes(&store);
    println!(
        "store before retention: {:.1} MB in use, {:.0} bytes per hook call",
        before as f64 / 1e6,
        before as f64 / hook_calls
    );
    measure_commands(&store, now);
    let (p50, p99) = apply_latency(&mut store, &lines, copies + 1, now - recorded);
    println!(
        "apply one event in its own transaction (a fresh copy, 1 per hook call): p50 {:.1} µs, p99 {:.1} µs",
        p50 * 1e6,
        p99 * 1e6
    );

    // The writer's sweep closes one batch a step, sized by how long the
    // last one took (`crates/hermes-meter-runtime/src/bridge/pace.rs`); each batch is one transaction, the
    // longest the write lock is held for it.
    let (mut closed, mut batches, mut first, mut longest) = (0, 0, Duration::ZERO, Duration::ZERO);
    let mut size = BatchSize::new(hermes_meter_store::IDLE_CLOSE_BATCH);
    loop {
        let t0 = Instant::now();
        let (n, more) = store.close_idle_batch(now, 900.0, size.get()).expect("idle sweep");
        let took = t0.elapsed();
        size.took(took, if more { size.get() } else { 0 });
        (closed, batches, first, longest) = (closed + n, batches + 1, first + took, longest.max(took));
        if !more {
            break;
        }
    }
    let t0 = Instant::now();
    store.close_idle_runs(now, 900.0).expect("idle sweep");
    println!(
        "idle sweep: {:.1} ms closing the {closed} runs the fill left open in {batches} transactions (longest {:.1} ms), then {:.2} ms with none open",
        ms(first),
        ms(longest),
        ms(t0.elapsed())
    );

    let (steps, spent) = retain(&mut store, now);
    store.checkpoint().expect("checkpoint");
    let after = bytes(&store);
    let times: Vec<String> = spent
        .into_iter()
        .map(|(what, mut spent)| {
            spent.sort();
            let at = |p: f64| ms(spent[((spent.len() - 1) as f64 * p).round() as usize]);
            format!("{what} {:.1}/{:.1}/{:.1}", at(0.5), at(0.99), at(1.0))
        })
        .collect();
    println!(
        "retention: {steps} steps (batches paced as the writer paces them) clear a year's backlog; \
         transaction ms p50/p99/max: {}",
        times.join(", ")
    );
    println!(
        "store after retention: {:.1} MB in use, {:.0} bytes per hook call of the year \
         (the ledger of the year and the journal retention keeps)",
        after as f64 / 1e6,
        after as f64 / hook_calls,
    );
    measure_commands(&store, now);
    drop(store);
    measure_viewer(&dir, now);
    measure_cli(&dir);
    measure_gating_hooks(&dir, &lines, copies + 2, now - recorded);
}

/// The commands as a user runs them: the release binary, its process
/// start included, median of three runs each.
fn measure_cli(dir: &Path) {
    let exe = env!("CARGO_BIN_EXE_hermes-meter");
    let home = dir.display().to_string();
    let time = |args: &[&str]| {
        let mut spent: Vec<Duration> = (0..3)
            .map(|_| {
                let t0 = Instant::now();
                let out = std::process::Command::new(exe)
                    .args(["--home", &home])
                    .args(args)
                    .output()
                    .expect("run hermes-meter");
                assert!(
                    out.status.success(),
                    "{args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                t0.elapsed()
            })
            .collect();
        spent.sort();
        ms(spent[1])
    };
    std::fs::write(dir.join("budgets.toml"), BUDGETS).expect("budgets");
    println!(
        "  CLI (median of 3, process start included): report {:.1} ms, report --since 1d {:.1} ms, \
         report --json --since 7d {:.1} ms, status {:.1} ms, budget list {:.1} ms",
        time(&["report"]),
        time(&["report", "--since", "1d"]),
        time(&["report", "--json", "--since", "7d"]),
        time(&["status"]),
        time(&["budget", "list"]),
    );
}

/// The path of request `k` of a viewer page.
type PathOf<'a> = Box<dyn Fn(usize) -> String + 'a>;

/// The viewer's pages over loopback HTTP, as a browser asks for them:
/// the first request of each page (its pages read from the disk or the
/// page cache) and the p50 / p95 of 20 more. Sessions for the session
/// pages are picked across the year.
fn measure_viewer(dir: &Path, now: f64) {
    use hermes_meter::ui::{UiConfig, UiServer};
    let conn = rusqlite::Connection::open(dir.join(hermes_meter_store::DB_FILE_NAME)).expect("open");
    let sessions: Vec<String> = conn
        .prepare("SELECT session_id FROM runs WHERE parent_session_id IS NULL ORDER BY started_at DESC")
        .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
        .expect("sessions");
    drop(conn);
    let pick = |k: usize| sessions[(k * 7_919) % sessions.len()].clone();
    let ui = UiServer::start(UiConfig {
        listen: "127.0.0.1:0".into(),
        store_dir: dir.to_path_buf(),
        token: None,
        span_options: hermes_meter_model::span::SpanOptions::default(),
        base: String::new(),
        hermes_home: None,
        trace_link: None,
    })
    .expect("viewer");
    let addr = ui.addr();
    let yesterday = jiff::Timestamp::from_second((now - DAY) as i64)
        .expect("time")
        .to_zoned(jiff::tz::TimeZone::system())
        .date();
    let deep = (sessions.len() / 2 / 50) * 50;
    let pages: Vec<(String, PathOf<'_>)> = vec![
        ("index".into(), Box::new(|_| "/".into())),
        (
            format!("index offset {deep}"),
            Box::new(move |_| format!("/?offset={deep}")),
        ),
        ("by cost".into(), Box::new(|_| "/?sort=cost".into())),
        ("by duration".into(), Box::new(|_| "/?sort=duration".into())),
        ("one day".into(), Box::new(move |_| format!("/?day={yesterday}"))),
        ("platform cron".into(), Box::new(|_| "/?platform=cron".into())),
        (
            "platform cron, page 20".into(),
            Box::new(|_| "/?platform=cron&offset=1000".into()),
        ),
        ("session".into(), Box::new(move |k| format!("/session/{}", pick(k)))),
    ];
    let mut out = Vec::new();
    for (name, path) in &pages {
        let t0 = Instant::now();
        let first = http_get::get(addr, &path(0), &[]);
        let first_ms = ms(t0.elapsed());
        assert_eq!(first.status, 200, "{name}: {}", first.body);
        let mut spent: Vec<f64> = (1..=20)
            .map(|k| {
                let t0 = Instant::now();
                let got = http_get::get(addr, &path(k), &[]);
                assert_eq!(got.status, 200, "{name}: {}", got.body);
                ms(t0.elapsed())
            })
            .collect();
        spent.sort_by(f64::total_cmp);
        out.push(format!("{name} {first_ms:.1}/{:.1}/{:.1}", spent[10], spent[19]));
    }
    println!("  viewer pages, ms first/p50/p95 (of 20): {}", out.join(", "));
}

/// Budgets every gating hook must ask about: enforced, and already over
/// (the slowest verdicts: each waits for its commit and the exact spend).
const BUDGETS: &str =
    "mode = \"enforce\"\n[global]\ndaily = 0.000001\nmonthly = 0.00001\n\n[per_model.default]\ndaily = 0.000001\n";

/// A gateway process on the year's store: one bridge serves a fresh copy
/// of the stream through the hook path with [`BUDGETS`] set, while its
/// writer runs its sweeps over the whole store. Prints the gating hooks'
/// p50/p99 (each waits for its verdict) and the others'.
fn measure_gating_hooks(dir: &Path, lines: &[String], copy: usize, shift: f64) {
    use hermes_meter_model::hook::HOOK_NAMES;
    use hermes_meter_runtime::bridge::{Bridge, BridgeConfig};
    let bridge = Bridge::start(BridgeConfig::new(dir.to_path_buf()));
    let (mut gating, mut others) = (Vec::new(), Vec::new());
    for c in 0..3 {
        let text = stream::session_copy(lines, copy + c, shift + c as f64);
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("json line");
            let Some(hook) = HOOK_NAMES.iter().find(|h| v["hook"] == **h) else {
                continue;
            };
            let at = v["t"].as_f64().unwrap_or(0.0);
            let t0 = Instant::now();
            bridge.submit_line(
                hook,
                line.as_bytes().to_vec(),
                at,
                hermes_meter_store::EventContext::default(),
            );
            let spent = t0.elapsed().as_secs_f64();
            if matches!(*hook, "pre_llm_call" | "pre_tool_call" | "pre_api_request") {
                gating.push(spent);
            } else {
                others.push(spent);
            }
        }
    }
    bridge.shutdown(Duration::from_secs(30));
    let at = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize] * 1e6
    };
    println!(
        "  hooks through a bridge on this store, budgets enforced and over: gating p50 {:.0} µs, p99 {:.0} µs \
         ({} calls, each waits for its verdict); others p50 {:.1} µs, p99 {:.1} µs",
        at(&mut gating, 0.5),
        at(&mut gating, 0.99),
        gating.len(),
        at(&mut others, 0.5),
        at(&mut others, 0.99),
    );
}

/// Sessions (runs) one copy of the stream makes.
fn sessions_per_copy(lines: &[String]) -> usize {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let path = dir.path().join("one.jsonl");
    std::fs::write(&path, stream::session_copy(lines, 0, 0.0)).expect("write");
    let mut stats = ReplayStats::default();
    replay_file(&mut store, &path, DecodeOptions::default(), &mut stats).expect("replay");
    let runs: i64 = store.query_scalar("SELECT COUNT(*) FROM runs").expect("runs");
    runs.max(1) as usize
}

/// Replays `copies` copies, copy `i` moved so the copies spread evenly
/// over the year before `now`, 200 copies a file.
fn fill(store: &mut Writer, dir: &Path, lines: &[String], copies: usize, recorded: f64, now: f64) -> ReplayStats {
    let path = dir.join("fill.jsonl");
    let mut stats = ReplayStats::default();
    let step = 365.0 * DAY / copies as f64;
    let mut i = 0;
    while i < copies {
        let mut text = String::new();
        for c in i..(i + 200).min(copies) {
            let at = now - 365.0 * DAY + c as f64 * step;
            text.push_str(&stream::session_copy(lines, c + 1, at - recorded));
        }
        std::fs::write(&path, text).expect("write chunk");
        replay_file(store, &path, DecodeOptions::default(), &mut stats).expect("replay");
        i += 200;
    }
    let _ = std::fs::remove_file(&path);
    stats
}

/// Applies copy `copy` of the stream (moved to now), one event per
/// transaction as a lone hook's commit, decoding outside the timer;
/// returns the p50 and p99 in seconds.
fn apply_latency(store: &mut Writer, lines: &[String], copy: usize, shift: f64) -> (f64, f64) {
    let ctx = hermes_meter_store::EventContext::default();
    let text = stream::session_copy(lines, copy, shift);
    let mut spent = Vec::new();
    for line in text.lines() {
        let rec = hermes_meter_model::hook::parse_line(line, false)
            .expect("line")
            .expect("record");
        let decoded =
            hermes_meter_model::hook::decode(&rec.hook, &rec.kwargs, rec.t.unwrap_or(0.0), DecodeOptions::default());
        if let hermes_meter_model::hook::Decoded::Event(e, _) = decoded {
            let t0 = Instant::now();
            store.apply(&e, &ctx).expect("apply");
            spent.push(t0.elapsed().as_secs_f64());
        }
    }
    spent.sort_by(f64::total_cmp);
    let at = |p: f64| spent[((spent.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

/// Pages in use (the file less its free pages), in bytes.
fn bytes(store: &Writer) -> i64 {
    let pages: i64 = store.query_scalar("PRAGMA page_count").expect("pages");
    let free: i64 = store.query_scalar("PRAGMA freelist_count").expect("free");
    let size: i64 = store.query_scalar("PRAGMA page_size").expect("page size");
    (pages - free) * size
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Times what `report`, `report --since 1d`, `status` and `export --since
/// 1h` read.
fn measure_commands(store: &Writer, now: f64) {
    let report = |since: f64| {
        // As `report` prints it: the 20 most expensive sessions.
        let t0 = Instant::now();
        let r = store
            .report(&jiff::tz::TimeZone::UTC, since, f64::MAX, Some(20))
            .expect("report");
        (t0.elapsed(), r.totals.llm_calls)
    };
    let (all, calls) = report(0.0);
    let (day, day_calls) = report(now - DAY);
    // As `report --json --since 7d` reads it: every session of the week.
    let t0 = Instant::now();
    let week = store
        .report(&jiff::tz::TimeZone::UTC, now - 7.0 * DAY, f64::MAX, None)
        .expect("report");
    let (week_ms, week_sessions) = (ms(t0.elapsed()), week.by_session.len());
    drop(week);
    let t0 = Instant::now();
    let counts = store.counts().expect("counts");
    store.export_state().expect("export state");
    store.metric_state().expect("metric state");
    let status = t0.elapsed();
    let t0 = Instant::now();
    let history = store.history(now - 3600.0).expect("history");
    let export = t0.elapsed();
    println!(
        "  report all time {:.1} ms ({calls} LLM calls; rollups up to {}); report --since 1d {:.1} ms ({day_calls}); \
         report --since 7d, every session {week_ms:.1} ms ({week_sessions}); \
         status {:.2} ms ({} journal rows); export --since 1h reads {:.1} ms ({} spans)",
        ms(all),
        store
            .rolled_until()
            .ok()
            .and_then(|t| jiff::Timestamp::from_second(t).ok())
            .map(|t| t.to_string())
            .unwrap_or_default(),
        ms(day),
        ms(status),
        counts.journal,
        ms(export),
        history.len()
    );
}

/// Runs retention steps as the writer does (each kind its own
/// transaction, `Writer::retain_step`, batches paced as the writer paces
/// them: `crates/hermes-meter-runtime/src/bridge/pace.rs`) until nothing is left to prune; returns the
/// steps and every transaction's time, by kind.
fn retain(store: &mut Writer, now: f64) -> (usize, Vec<(&'static str, Vec<Duration>)>) {
    // The plugin's defaults, as the writer cuts with them.
    let config = hermes_meter_runtime::bridge::BridgeConfig::new(std::path::PathBuf::new());
    let cut = hermes_meter_runtime::bridge::retain_cutoffs(&config, now);
    let mut cursor = ContentCursor::default();
    let mut sizes = RetainKind::ALL.map(|kind| BatchSize::new(kind.most()));
    let mut times: Vec<(&'static str, Vec<Duration>)> =
        RetainKind::ALL.iter().map(|kind| (kind.doing(), Vec::new())).collect();
    let mut steps = 0;
    loop {
        let mut handled = 0;
        for (i, kind) in RetainKind::ALL.into_iter().enumerate() {
            let size = sizes[i].get();
            let t0 = Instant::now();
            let done = store
                .retain_step(kind, size, &cut, &mut cursor, &mut hermes_meter_model::metrics::measure)
                .unwrap_or_else(|e| panic!("{}: {e}", kind.doing()));
            let took = t0.elapsed();
            sizes[i].took(took, if done.more { size } else { done.handled });
            times[i].1.push(took);
            handled += done.handled;
        }
        steps += 1;
        // The writer checkpoints every second and steps every 200 ms.
        if steps % 5 == 0 {
            store.checkpoint().expect("checkpoint");
        }
        if handled == 0 {
            return (steps, times);
        }
    }
}
