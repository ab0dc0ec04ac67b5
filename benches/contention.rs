//! Hook latency with 8 OS processes × 4 threads writing one store: the time
//! from a decoded event to `submit_recorded` returning (spool write, queue),
//! which is what a hook adds besides copying its kwargs under the GIL.
//!
//! Two runs: without budgets (the default: no hook waits for a commit) and
//! with a budget enforced (the gating hooks wait for their verdict).
//!
//! Run: `cargo bench --bench contention` (`-- --processes N --threads N
//! --sessions N` to change the load).

use hermes_meter_test_support::load;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn main() {
    load::run_child_if_asked();
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let processes = arg(&args, "--processes", 8);
    let threads = arg(&args, "--threads", 4);
    let sessions = arg(&args, "--sessions", if full { 100 } else { 2 });
    // Without budgets (the default) no hook waits for a commit; with a
    // budget in enforce mode the gating hooks wait for their verdict.
    for budgets in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        drop(hermes_meter_store::Writer::open_dir(dir.path()).expect("create the store"));
        if budgets {
            std::fs::write(dir.path().join("budgets.toml"), "[global]\ndaily = 1000000.0\n").expect("budgets");
        }
        let t0 = std::time::Instant::now();
        let r = load::run(dir.path(), processes, threads, sessions, &[]);
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "{processes} processes × {threads} threads, {}: {} hook calls in {secs:.1} s: p50 {:.1} µs  p99 {:.1} µs  p99.9 {:.1} µs  max {:.0} µs  ({} failed)",
            if budgets { "a budget enforced" } else { "no budgets" },
            r.latencies.len(),
            r.percentile(0.5).as_secs_f64() * 1e6,
            r.percentile(0.99).as_secs_f64() * 1e6,
            r.percentile(0.999).as_secs_f64() * 1e6,
            r.latencies.last().map(|d| d.as_secs_f64() * 1e6).unwrap_or(0.0),
            r.failures
        );
    }
}
