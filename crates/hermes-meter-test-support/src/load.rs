//! A multi-process load on one store, for the contention test and bench.
//!
//! The parent runs the current executable again once per process with
//! [`CHILD_ENV`] set; each child starts a [`Bridge`] on the shared store and
//! runs `threads` threads, each submitting `sessions` copies of a recorded
//! session (fresh ids per copy) through the hook path, timing every submit.
//! The child flushes, writes its latencies (nanoseconds, one per line) and
//! exits. The parent checks the store's totals and merges the latencies.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hermes_meter_model::hook::parse_line;
use hermes_meter_model::hook::{self, decode, DecodeOptions, Decoded};
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig, Outcome};
use hermes_meter_runtime::budget::BudgetGate;
use hermes_meter_store::EventContext;

/// Set in a child: `<store dir>|<process index>|<threads>|<sessions per thread>`.
pub const CHILD_ENV: &str = "HERMES_METER_LOAD_CHILD";

/// The recorded session every thread submits copies of.
pub fn session_fixture() -> PathBuf {
    crate::repository().join("tests/fixtures/readfile.jsonl")
}

const SESSION_ID: &str = "20261130_013735_bf4b63";

/// What a load run measured.
pub struct LoadResult {
    /// Every submit's latency, sorted.
    pub latencies: Vec<Duration>,
    /// Submits that reported a failure or a disabled bridge.
    pub failures: usize,
}

impl LoadResult {
    pub fn percentile(&self, p: f64) -> Duration {
        self.latencies[((self.latencies.len() as f64 - 1.0) * p).round() as usize]
    }
}

/// If this process is a load child, runs it and exits.
pub fn run_child_if_asked() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let (dir, index, threads, sessions) = (
        PathBuf::from(parts[0]),
        parts[1].parse::<usize>().expect("index"),
        parts[2].parse::<usize>().expect("threads"),
        parts[3].parse::<usize>().expect("sessions"),
    );
    let lines: Vec<String> = std::fs::read_to_string(session_fixture())
        .expect("fixture")
        .lines()
        .map(str::to_string)
        .collect();
    // The gate the plugin runs with: budgets from `budgets.toml` in the
    // store directory, if the parent wrote one.
    let gate = Box::new(BudgetGate::for_store_dir(&dir, None, false));
    let bridge = Bridge::start_with_gate(BridgeConfig::new(dir.clone()), gate);
    assert!(bridge.disabled_reason().is_none(), "{:?}", bridge.disabled_reason());
    let mut failures = 0;
    let mut latencies = Vec::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (bridge, lines) = (&bridge, &lines);
                s.spawn(move || {
                    let mut lat = Vec::new();
                    let mut failed = 0;
                    for n in 0..sessions {
                        let sid = format!("load_{index:02}_{t:02}_{n:05}");
                        for line in lines {
                            let line = line.replace(SESSION_ID, &sid);
                            let rec = parse_line(&line, false).expect("record").expect("line");
                            let at = rec.t.expect("t");
                            let t0 = Instant::now();
                            // What the binding does after copying the kwargs.
                            if let Decoded::Event(event, problems) =
                                decode(&rec.hook, &rec.kwargs, at, DecodeOptions::default())
                            {
                                let ctx = EventContext {
                                    pid: Some(i64::from(std::process::id())),
                                    thread: None,
                                    profile: None,
                                    problems,
                                };
                                let record = hook::write_record(&rec.hook, at, ctx.pid, None, &rec.kwargs, false);
                                let outcome = bridge.submit_recorded(event, ctx, Some(&record));
                                lat.push(t0.elapsed());
                                if matches!(outcome, Outcome::Failed | Outcome::Disabled) {
                                    failed += 1;
                                }
                            }
                        }
                    }
                    (lat, failed)
                })
            })
            .collect();
        for h in handles {
            let (lat, failed) = h.join().expect("load thread");
            latencies.extend(lat);
            failures += failed;
        }
    });
    assert!(bridge.flush(Duration::from_secs(60)), "everything commits");
    let stats = bridge.stats();
    drop(bridge);
    let out = dir.join(format!("latencies-{index}.txt"));
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).expect("latency file"));
    writeln!(file, "failures {}", failures + stats.failed as usize).expect("write");
    for l in latencies {
        writeln!(file, "{}", l.as_nanos()).expect("write");
    }
    drop(file);
    std::process::exit(0);
}

/// Runs `processes` children of `threads` threads, each submitting
/// `sessions` sessions, on the store in `dir`; returns what they measured.
pub fn run(dir: &Path, processes: usize, threads: usize, sessions: usize, child_args: &[&str]) -> LoadResult {
    let children: Vec<Child> = (0..processes)
        .map(|i| {
            Command::new(std::env::current_exe().expect("current exe"))
                .args(child_args)
                .env(CHILD_ENV, format!("{}|{i}|{threads}|{sessions}", dir.display()))
                .spawn()
                .expect("spawn a load child")
        })
        .collect();
    for mut c in children {
        let status = c.wait().expect("wait for a load child");
        assert!(status.success(), "a load child failed: {status}");
    }
    let mut latencies = Vec::new();
    let mut failures = 0;
    for i in 0..processes {
        let text = std::fs::read_to_string(dir.join(format!("latencies-{i}.txt"))).expect("latencies");
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("failures ") {
                failures += n.parse::<usize>().expect("count");
            } else {
                latencies.push(Duration::from_nanos(line.parse().expect("nanos")));
            }
        }
    }
    latencies.sort();
    LoadResult { latencies, failures }
}
