//! Fleet budget benchmark: what the fleet costs a hook, and how stale the
//! other hosts' spend is under load.
//!
//! Run: `cargo bench --bench fleet` (`-- --seconds N` for a longer load
//! phase). Needs Debian's PostgreSQL (started here on a Unix socket in a
//! temporary directory, as for `tests/fleet.rs`).
//!
//! 1. Hook overhead: a `pre_api_request` (gating, waits for its verdict) and
//!    its `post_api_request`, timed through the bridge with a budget gate,
//!    the fleet off and then on (a fleet synced every second, a limit far
//!    away so nothing blocks). Prints p50 and p99 of each.
//! 2. Sync lag under load: three hosts (stores) spend as fast as their hooks
//!    go; every 10 ms a probe reads, on the observing host, the other hosts'
//!    spend in its fleet view and how long ago the spend it shows was
//!    recorded (visibility lag), and each host's time since its last
//!    successful sync (`hermes_fleet_sync_lag_seconds`). Prints p50 and p99.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_meter_test_support::budget_events;
use hermes_meter_test_support::postgres;

use budget_events::{post_api, pre_api, CALL_USD};
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig};
use hermes_meter_runtime::budget::BudgetGate;
use hermes_meter_runtime::fleet::task::FleetTask;
use hermes_meter_runtime::fleet::FleetConfig;
use hermes_meter_store::{EventContext, Writer};

fn summary(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!(
        "p50 {:.1} p99 {:.1} (n {})",
        hermes_meter_test_support::percentile(&v, 0.5),
        hermes_meter_test_support::percentile(&v, 0.99),
        v.len()
    )
}

const BUDGETS: &str = "timezone = \"UTC\"\n[global]\ndaily = 1000000\n";

struct Host {
    bridge: Bridge,
    _fleet: Option<FleetTask>,
    store: Writer,
    session: String,
    n: usize,
}

impl Host {
    fn start(dir: &Path, fleet: Option<&str>) -> Host {
        std::fs::write(dir.join("budgets.toml"), BUDGETS).expect("budgets");
        let mut cfg = BridgeConfig::new(dir.to_path_buf());
        cfg.hook_wait = Duration::from_secs(10);
        let gate = BudgetGate::new(dir.join("budgets.toml"), None).with_fleet(fleet.is_some());
        let bridge = Bridge::start_with_gate(cfg, Box::new(gate));
        let fleet = fleet.map(|url| FleetTask::start(dir, FleetConfig::parse(url).expect("url")).expect("fleet"));
        Host {
            bridge,
            _fleet: fleet,
            store: Writer::open_dir(dir).expect("open"),
            session: format!("b{}", fastrand::u32(..)),
            n: 0,
        }
    }

    /// One call; the two hooks' latencies in µs.
    fn call(&mut self) -> (f64, f64) {
        self.n += 1;
        let id = format!("{}:api:{}", self.session, self.n);
        let t = Instant::now();
        self.bridge.submit(
            pre_api(&self.session, &id, hermes_meter_store::unix_now()),
            EventContext::default(),
        );
        let pre = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        self.bridge.submit(
            post_api(&self.session, &id, hermes_meter_store::unix_now(), true),
            EventContext::default(),
        );
        (pre, t.elapsed().as_secs_f64() * 1e6)
    }

    fn synced(&self) -> bool {
        self.store
            .fleet_status()
            .ok()
            .flatten()
            .is_some_and(|s| s.synced_at.is_some())
    }
}

fn hook_overhead(url: &str, calls: usize) {
    for (name, fleet) in [("fleet off", None), ("fleet on", Some(url))] {
        let dir = tempfile::tempdir().expect("dir");
        let mut host = Host::start(dir.path(), fleet);
        while fleet.is_some() && !host.synced() {
            std::thread::sleep(Duration::from_millis(10));
        }
        for _ in 0..200 {
            host.call();
        }
        let (mut pre, mut post) = (Vec::new(), Vec::new());
        for _ in 0..calls {
            let (a, b) = host.call();
            pre.push(a);
            post.push(b);
        }
        println!(
            "hook overhead, {name}: pre_api_request {} µs; post_api_request {} µs",
            summary(pre),
            summary(post)
        );
    }
}

fn sync_lag(url: &str, seconds: f64) {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    // (time, calls made by the spenders so far), appended after each call.
    let timeline: Arc<Mutex<Vec<(f64, usize)>>> = Arc::default();
    let observer = Host::start(dirs[0].path(), Some(url));
    let spenders: Vec<_> = dirs[1..]
        .iter()
        .map(|d| {
            let (dir, url, stop, timeline) = (d.path().to_path_buf(), url.to_string(), stop.clone(), timeline.clone());
            std::thread::spawn(move || {
                let mut host = Host::start(&dir, Some(&url));
                while !host.synced() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                while !stop.load(Ordering::Relaxed) {
                    host.call();
                    let mut t = timeline.lock().expect("timeline");
                    let made = t.last().map_or(0, |l| l.1) + 1;
                    t.push((hermes_meter_store::unix_now(), made));
                }
                host
            })
        })
        .collect();
    let (mut visible, mut lag) = (Vec::new(), Vec::new());
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
        let now = hermes_meter_store::unix_now();
        if let Some(st) = observer.store.fleet_status().ok().flatten() {
            if let Some(l) = st.lag_seconds(now) {
                lag.push(l * 1000.0);
            }
        }
        let seen: f64 = observer
            .store
            .query_scalar(
                "SELECT COALESCE(SUM(others_cost_usd), 0) FROM fleet_view WHERE scope = 'global' AND win = 'daily'",
            )
            .expect("view");
        let calls = (seen / CALL_USD).round() as usize;
        let t = timeline.lock().expect("timeline");
        // The spend the observer shows was complete at the time the
        // spenders' call count reached it; the newest call not shown yet
        // was made after that.
        if calls > 0 {
            if let Some(next) = t.iter().find(|(_, n)| *n == calls + 1) {
                visible.push((now - next.0).max(0.0) * 1000.0);
            } else if t.last().is_some_and(|l| l.1 == calls) {
                visible.push(0.0);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let made = timeline.lock().expect("timeline").last().map_or(0, |l| l.1);
    for s in spenders {
        drop(s.join().expect("spender"));
    }
    println!(
        "sync under load ({made} calls by 2 hosts in {seconds} s): visibility lag {} ms; time since the last sync {} ms",
        summary(visible),
        summary(lag)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(20.0);
    let pg = postgres::Postgres::start();
    hook_overhead(&pg.url(), 2000);
    sync_lag(&pg.url(), seconds);
}
