//! Fleet budgets against a real PostgreSQL (Debian's, started by the test
//! on a Unix socket in a temporary directory; see `support/postgres.rs`):
//! hosts are stores with their own bridge, gate and fleet sync, in this
//! process or, where it matters, in processes of their own.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hermes_meter_test_support::budget_events;
use hermes_meter_test_support::http_get;
use hermes_meter_test_support::postgres;

use budget_events::{post_api, pre_api, pre_tool, CALL_USD};
use hermes_meter_model::budget::{BudgetUnit, Scope, Window, BLOCKED_MODEL, BUDGETS_FILE_NAME};
use hermes_meter_model::budget::{Unsynced, FIRST_SYNC_WAIT, UNSYNCED_ENV};
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig, Outcome, Verdict};
use hermes_meter_runtime::budget::{BudgetGate, BudgetHandle};
use hermes_meter_runtime::fleet::task::FleetTask;
use hermes_meter_runtime::fleet::{FleetConfig, FLEET_URL_ENV};
use hermes_meter_store::{EventContext, FleetStatus, Outbox, Writer};
use postgres::Postgres;

/// The child process's mode (`spend` or `crash`) and its store directory.
const CHILD_MODE: &str = "HERMES_METER_FLEET_TEST_CHILD";
const CHILD_DIR: &str = "HERMES_METER_FLEET_TEST_DIR";
/// How many hosts a spending child waits to see before it spends.
const CHILD_HOSTS: &str = "HERMES_METER_FLEET_TEST_HOSTS";
/// The window of the global budget a spending child spends against.
const CHILD_WINDOW: &str = "HERMES_METER_FLEET_TEST_WINDOW";

/// Polls `ok` until it holds; fails after a minute.
fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sets the fleet's global daily limit with `hermes-meter budget set` on
/// the host of `dir`.
fn set_fleet_limit(url: &str, dir: &Path, usd: f64) {
    fleet_budget_set(url, dir, &["global", "daily", &usd.to_string()]);
}

/// `hermes-meter budget set ARGS` on the host of `dir`, for the fleet.
fn fleet_budget_set(url: &str, dir: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .args(["budget", "set"])
        .args(args)
        .env("HERMES_METER_HOME", dir)
        .env(FLEET_URL_ENV, url)
        .output()
        .expect("run hermes-meter");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// One host: a store with its bridge, budget gate and fleet sync.
struct Host {
    dir: PathBuf,
    bridge: Bridge,
    handle: BudgetHandle,
    _fleet: FleetTask,
    store: Writer,
    session: String,
    calls: usize,
}

impl Host {
    fn start(dir: &Path, url: &str) -> Host {
        Self::start_unsynced(dir, url, Unsynced::default())
    }

    /// [`Host::start`] doing `unsynced` until its store first syncs.
    fn start_unsynced(dir: &Path, url: &str, unsynced: Unsynced) -> Host {
        let mut cfg = BridgeConfig::new(dir.to_path_buf());
        cfg.hook_wait = Duration::from_secs(10);
        let name = FleetConfig::parse(url).expect("url").redacted();
        let gate = BudgetGate::new(dir.join(BUDGETS_FILE_NAME), None)
            .with_fleet(true)
            .with_unsynced(unsynced, Some(name));
        let handle = gate.handle();
        let bridge = Bridge::start_with_gate(cfg, Box::new(gate));
        assert!(bridge.disabled_reason().is_none());
        let fleet = FleetTask::start(dir, FleetConfig::parse(url).expect("url")).expect("fleet task");
        Host {
            dir: dir.to_path_buf(),
            bridge,
            handle,
            _fleet: fleet,
            store: Writer::open_dir(dir).expect("open"),
            session: format!("s{}-{}", std::process::id(), fastrand::u32(..)),
            calls: 0,
        }
    }

    /// One LLM call: `Ok` when it went ahead, else the stop text.
    fn call(&mut self) -> Result<(), String> {
        self.calls += 1;
        let id = format!("{}:api:{}", self.session, self.calls);
        let outcome = self.bridge.submit(
            pre_api(&self.session, &id, hermes_meter_store::unix_now()),
            EventContext::default(),
        );
        assert_eq!(
            outcome,
            Outcome::Committed(None),
            "the hook is not held up by the fleet"
        );
        if let Some(text) = self.handle.stop_for(&id) {
            // Hermes then reports the stand-in response, which settles the
            // call's reservation at no cost.
            let mut blocked = post_api(&self.session, &id, hermes_meter_store::unix_now(), false);
            if let hermes_meter_model::hook::Hook::PostApiRequest(p) = &mut blocked.hook {
                p.response_model = Some(BLOCKED_MODEL.into());
            }
            self.bridge.submit(blocked, EventContext::default());
            return Err(text);
        }
        let outcome = self.bridge.submit(
            post_api(&self.session, &id, hermes_meter_store::unix_now(), true),
            EventContext::default(),
        );
        assert!(matches!(outcome, Outcome::Committed(_)), "{outcome:?}");
        Ok(())
    }

    /// The verdict of a tool call now.
    fn tool(&mut self) -> Option<Verdict> {
        self.calls += 1;
        let id = format!("{}:tool:{}", self.session, self.calls);
        match self.bridge.submit(
            pre_tool(&self.session, &id, hermes_meter_store::unix_now()),
            EventContext::default(),
        ) {
            Outcome::Committed(v) => v,
            other => panic!("{other:?}"),
        }
    }

    fn status(&self) -> FleetStatus {
        self.store.fleet_status().expect("status").expect("synced once")
    }

    fn synced_since(&self, t: f64) -> bool {
        self.store
            .fleet_status()
            .expect("status")
            .is_some_and(|s| s.synced_at.is_some_and(|at| at > t) && s.error.is_none())
    }

    /// The global daily budget as this host sees it now (fleet spend).
    fn global(&self) -> hermes_meter_model::budget::BudgetState {
        self.daily(Scope::Global)
    }

    /// The daily budget of `scope` (its one id) as this host sees it now.
    fn daily(&self, scope: Scope) -> hermes_meter_model::budget::BudgetState {
        self.state(scope, Window::Daily)
    }

    fn state(&self, scope: Scope, window: Window) -> hermes_meter_model::budget::BudgetState {
        let mut cfg = hermes_meter_runtime::config::load_budgets(&self.dir.join(BUDGETS_FILE_NAME)).expect("budgets");
        cfg.fleet = true;
        let states = self
            .store
            .budget_states(&cfg, hermes_meter_store::unix_now())
            .expect("states");
        states
            .into_iter()
            .find(|s| s.budget.scope == scope && s.budget.window == window)
            .expect("a budget of the scope in the window")
    }

    /// Makes this host's next calls those of a run of cron job `job`.
    fn cron_run(&mut self, job: &str) {
        self.session = format!("cron_{job}_20261201_{:06}", fastrand::u32(..1_000_000));
        let outcome = self.bridge.submit(
            budget_events::event(
                "pre_llm_call",
                hermes_meter_store::unix_now(),
                serde_json::json!({"session_id": self.session, "turn_id": format!("{}:t", self.session),
                                   "model": "gpt-4o", "platform": "cron"}),
            ),
            EventContext::default(),
        );
        assert!(matches!(outcome, Outcome::Committed(_)), "{outcome:?}");
    }

    /// What this store recorded: (cost, calls).
    fn local(&self) -> (f64, i64) {
        let cost: f64 = self
            .store
            .query_scalar("SELECT TOTAL(cost_usd) FROM llm_calls")
            .expect("cost");
        let calls: i64 = self
            .store
            .query_scalar("SELECT COUNT(*) FROM llm_calls")
            .expect("calls");
        (cost, calls)
    }

    /// Waits until everything this host spent is in the fleet database.
    fn wait_pushed(&self) {
        let t = hermes_meter_store::unix_now();
        assert!(self.bridge.flush(Duration::from_secs(10)));
        eventually("a sync after the last call", || self.synced_since(t));
    }
}

/// The fleet database's totals for the global scope: (cost, calls).
fn fleet_totals(pg: &Postgres) -> (f64, i64) {
    let row = pg.psql("SELECT TOTAL_COST, CALLS FROM (SELECT COALESCE(SUM(cost_usd), 0) AS TOTAL_COST, COALESCE(SUM(calls), 0) AS CALLS FROM hermes_fleet_spend WHERE scope = 'global') t");
    let (cost, calls) = row.split_once('|').expect("two columns");
    (cost.parse().expect("cost"), calls.parse().expect("calls"))
}

fn child_summary(out: &std::process::Output) -> Vec<f64> {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find_map(|l| l.find("CHILD ").map(|i| l[i + 6..].to_string()))
        .unwrap_or_else(|| panic!("no summary in {text}"));
    line.split_whitespace().map(|n| n.parse().expect("number")).collect()
}

#[test]
fn three_hosts_spending_at_once_overshoot_by_at_most_their_leases() {
    three_hosts_spend_at_once("daily");
}

/// The same under a rolling window: its fleet row is the window as of
/// each sync, and leases are taken from it as from a calendar one.
#[test]
fn three_hosts_spending_at_once_in_a_rolling_window_overshoot_by_at_most_their_leases() {
    three_hosts_spend_at_once("5h");
}

fn three_hosts_spend_at_once(window: &str) {
    let pg = Postgres::start();
    let limit = 1.5;
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("temp dir")).collect();
    fleet_budget_set(&pg.url(), dirs[0].path(), &["global", window, &limit.to_string()]);
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = dirs
        .iter()
        .map(|dir| {
            Command::new(&exe)
                .args([
                    "--exact",
                    &hermes_meter_test_support::test_name(module_path!(), "fleet_child_process"),
                ])
                .args(["--nocapture", "--test-threads", "1"])
                .env(CHILD_MODE, "spend")
                .env(CHILD_DIR, dir.path())
                .env(CHILD_HOSTS, "3")
                .env(CHILD_WINDOW, window)
                .env(FLEET_URL_ENV, pg.url())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut leases = 0.0;
    let mut spent_by_host = Vec::new();
    for child in children {
        let s = child_summary(&child.wait_with_output().expect("child"));
        assert!(s[0] >= 1.0, "each host made calls: {s:?}");
        leases += s[1];
        spent_by_host.push(s[2]);
    }
    let total: f64 = spent_by_host.iter().sum();
    let (fleet_cost, fleet_calls) = fleet_totals(&pg);
    assert!((fleet_cost - total).abs() < 1e-9, "fleet {fleet_cost} vs hosts {total}");
    assert_eq!(
        fleet_calls,
        (total / CALL_USD).round() as i64,
        "every call counted once"
    );
    // Each host stopped only once the fleet's spend reached the line.
    assert!(total >= limit - 1e-9, "{total}");
    // The documented bound: the leases, plus the calls in flight (one per host).
    assert!(
        total <= limit + leases + 3.0 * CALL_USD + 1e-9,
        "overshoot {} beyond leases {leases}",
        total - limit
    );
    // No host could have spent the limit alone: the others' spend stopped it.
    assert!(spent_by_host.iter().all(|s| *s < limit), "{spent_by_host:?}");
}

#[test]
fn fleet_child_process() {
    let (Some(mode), Some(dir)) = (std::env::var_os(CHILD_MODE), std::env::var_os(CHILD_DIR)) else {
        return;
    };
    let url = std::env::var(FLEET_URL_ENV).expect("fleet url");
    let dir = PathBuf::from(dir);
    let mut host = Host::start(&dir, &url);
    match mode.to_str() {
        Some("spend") => child_spend(&mut host),
        Some("crash") => child_crash(&mut host),
        other => panic!("unknown mode {other:?}"),
    }
}

/// Spends until the fleet's budget is exhausted; prints calls made, the
/// largest lease held and what it spent.
fn child_spend(host: &mut Host) {
    let hosts: i64 = std::env::var(CHILD_HOSTS).expect("hosts").parse().expect("number");
    let window = std::env::var(CHILD_WINDOW).unwrap_or_else(|_| "daily".into());
    let win = Window::parse(&window).expect("a window");
    eventually("every host in the fleet", || {
        host.store
            .fleet_status()
            .ok()
            .flatten()
            .is_some_and(|s| s.hosts >= hosts && s.synced_at.is_some())
            && host.handle.enforcing()
    });
    let lease = |host: &Host| -> f64 {
        host.store
            .query_scalar(&format!(
                "SELECT COALESCE(MAX(lease_usd), 0) FROM fleet_view WHERE scope = 'global' AND win = '{window}'"
            ))
            .expect("lease")
    };
    let (mut made, mut max_lease) = (0, lease(host));
    loop {
        match host.call() {
            Ok(()) => made += 1,
            Err(text) => {
                assert!(text.starts_with("BUDGET-EXCEEDED"), "{text}");
                if host.state(Scope::Global, win).level == hermes_meter_model::budget::Level::Hard {
                    break;
                }
                // The lease is spent: wait for the next sync to take another.
                let synced = host.status().synced_at;
                eventually("the next sync", || host.status().synced_at != synced);
            }
        }
        max_lease = max_lease.max(lease(host));
        // The provider call takes a moment, so the hosts overlap.
        std::thread::sleep(Duration::from_millis(2));
    }
    host.wait_pushed();
    println!("CHILD {made} {max_lease} {}", host.local().0);
}

/// Spends until killed, printing each call made.
fn child_crash(host: &mut Host) {
    loop {
        host.call().expect("far from the limit");
        println!("made {}", host.calls);
    }
}

#[test]
fn a_database_outage_loosens_nothing_and_loses_nothing() {
    let mut pg = Postgres::start();
    let (da, db) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    set_fleet_limit(&pg.url(), da.path(), 1.0);
    let mut a = Host::start(da.path(), &pg.url());
    let mut b = Host::start(db.path(), &pg.url());
    eventually("two hosts", || {
        [&a, &b]
            .iter()
            .all(|h| h.store.fleet_status().ok().flatten().is_some_and(|s| s.hosts == 2))
    });
    for _ in 0..8 {
        a.call().expect("under the limit");
        b.call().expect("under the limit");
    }
    a.wait_pushed();
    b.wait_pushed();
    // Both see the fleet's $0.40; each holds a lease of (1.00 - 0.40) / 2.
    eventually("both views at $0.40", || {
        [&a, &b]
            .iter()
            .all(|h| (h.global().spend.total() - 16.0 * CALL_USD).abs() < 1e-9)
    });
    let lease = (1.0 - 16.0 * CALL_USD) / 2.0;

    pg.stop();
    let down = hermes_meter_store::unix_now();
    // Hooks go on; A spends its lease and no more, then is blocked with
    // the budget text.
    let mut made = 0;
    let text = loop {
        match a.call() {
            Ok(()) => made += 1,
            Err(text) => break text,
        }
        assert!(made < 100, "never stopped");
    };
    assert!(text.starts_with("BUDGET-EXCEEDED"), "{text}");
    // The fleet is under its line: the text says the lease, not the budget, is used up.
    assert!(
        text.contains("this host's share of the fleet's global daily budget is used up") && !text.contains("exhausted"),
        "{text}"
    );
    let spent = made as f64 * CALL_USD;
    assert!(
        spent >= lease - CALL_USD - 1e-9 && spent <= lease + 1e-9,
        "spent {spent} on a lease of {lease}"
    );
    assert!(
        matches!(a.tool(), Some(Verdict::Block { .. })),
        "tool calls are blocked too"
    );
    // The outage shows: the last attempt failed, the last success is older.
    eventually("A's failed sync", || a.status().error.is_some());
    assert!(a.status().synced_at.expect("synced before") < down);
    // B still counts A's spend as of the last sync.
    assert!((b.global().spend.total() - 16.0 * CALL_USD).abs() < 1e-9);

    pg.resume();
    let up = hermes_meter_store::unix_now();
    eventually("both hosts synced again", || a.synced_since(up) && b.synced_since(up));
    let (fa, fb) = (a.local(), b.local());
    let (cost, calls) = fleet_totals(&pg);
    assert_eq!(calls, fa.1 + fb.1, "nothing lost, nothing counted twice");
    assert!((cost - fa.0 - fb.0).abs() < 1e-9);
    eventually("B sees A's spend during the outage", || {
        (b.global().spend.total() - cost).abs() < 1e-9
    });
    // A fresh lease: A may spend again.
    assert!(a.call().is_ok(), "a new lease after the outage");
}

#[test]
fn a_host_killed_mid_run_catches_up_without_counting_twice() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().expect("dir");
    set_fleet_limit(&pg.url(), dir.path(), 1000.0);
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(&exe)
        .args([
            "--exact",
            &hermes_meter_test_support::test_name(module_path!(), "fleet_child_process"),
        ])
        .args(["--nocapture", "--test-threads", "1"])
        .env(CHILD_MODE, "crash")
        .env(CHILD_DIR, dir.path())
        .env(FLEET_URL_ENV, pg.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // Some of its spend synced, some not yet.
    let mut pushed_some = false;
    let mut made: i64 = 0;
    while let Some(Ok(line)) = lines.next() {
        if line.starts_with("made ") {
            made += 1;
        }
        if !pushed_some && made >= 10 {
            let (_, calls) = fleet_totals(&pg);
            pushed_some = calls > 0;
        }
        if pushed_some && made >= 40 {
            break;
        }
    }
    child.kill().expect("kill -9");
    let _ = child.wait();
    // The child ran ahead of this reader: the rest of its lines.
    made += lines.map_while(|l| l.ok()).filter(|l| l.starts_with("made ")).count() as i64;
    // A call may have committed (and been pushed) before its line was printed.
    let (_, before) = fleet_totals(&pg);
    assert!(before > 0 && before <= made + 1, "{before} pushed of {made}");

    // The restarted host recovers the spool, takes the fleet lease over at
    // once and pushes the rest.
    let host = Host::start(dir.path(), &pg.url());
    host.wait_pushed();
    let (cost, calls) = host.local();
    assert!(
        calls >= made,
        "every call that returned is in the store: {calls} of {made}"
    );
    let (fleet_cost, fleet_calls) = fleet_totals(&pg);
    assert_eq!(fleet_calls, calls, "nothing lost, nothing counted twice");
    assert!((fleet_cost - cost).abs() < 1e-9);
    assert_eq!(
        pg.psql("SELECT COUNT(*) FROM hermes_fleet_hosts"),
        "1",
        "the same host after a restart"
    );
}

#[test]
fn budget_edits_reach_every_host_and_status_shows_no_password() {
    let pg = Postgres::start();
    let (da, db) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    // A password in the URL (the cluster trusts local connections, so it
    // is not checked): it must never be printed.
    let url = pg.url().replace("postgres@", "postgres:hunter2@");
    let a = Host::start(da.path(), &url);
    let b = Host::start(db.path(), &url);
    let cli = |dir: &Path, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
            .args(args)
            .env("HERMES_METER_HOME", dir)
            .env(FLEET_URL_ENV, &url)
            .output()
            .expect("run hermes-meter");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{args:?}: {text}");
        assert!(!text.contains("hunter2"), "{args:?} printed the password: {text}");
        text
    };
    cli(da.path(), &["budget", "set", "global", "daily", "5"]);
    let limit_in = |dir: &Path| {
        hermes_meter_runtime::config::load_budgets(&dir.join(BUDGETS_FILE_NAME))
            .ok()
            .and_then(|c| c.limits(Scope::Global, "").get(Window::Daily, BudgetUnit::Usd))
    };
    eventually("B has A's budget", || limit_in(db.path()) == Some(5.0));
    cli(db.path(), &["budget", "set", "sender", "alice", "daily", "2"]);
    cli(db.path(), &["budget", "rm", "global", "daily"]);
    eventually("A has B's edits", || {
        limit_in(da.path()).is_none()
            && hermes_meter_runtime::config::load_budgets(&da.path().join(BUDGETS_FILE_NAME))
                .is_ok_and(|c| c.limits(Scope::Sender, "alice").get(Window::Daily, BudgetUnit::Usd) == Some(2.0))
    });
    cli(da.path(), &["budget", "set", "global", "daily", "5"]);
    let mut a = a;
    for _ in 0..4 {
        a.call().expect("under the limit");
    }
    a.wait_pushed();
    let t = hermes_meter_store::unix_now();
    eventually("B synced after A's spend", || b.synced_since(t));
    let list = cli(db.path(), &["budget", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&list).expect("json");
    let global = v["budgets"]
        .as_array()
        .expect("budgets")
        .iter()
        .find(|r| r["scope"] == "global" && r["window"] == "daily")
        .expect("global daily")
        .clone();
    assert!(
        (global["spend_usd"].as_f64().expect("spend") - 4.0 * CALL_USD).abs() < 1e-9,
        "{global}"
    );
    assert_eq!(global["this_host_usd"].as_f64(), Some(0.0), "{global}");
    assert_eq!(global["verdict"], "ok");
    let status = cli(db.path(), &["status"]);
    assert!(status.contains("fleet"), "{status}");
}

#[test]
fn the_sync_lag_grows_in_status_and_metrics_while_the_database_is_down() {
    let mut pg = Postgres::start();
    let dir = tempfile::tempdir().expect("dir");
    set_fleet_limit(&pg.url(), dir.path(), 10.0);
    let mut host = Host::start(dir.path(), &pg.url());
    host.call().expect("under the limit");
    host.wait_pushed();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .args(["serve", "--prometheus", "127.0.0.1:0"])
        .env("HERMES_METER_HOME", dir.path())
        .env(FLEET_URL_ENV, pg.url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    let mut stderr = BufReader::new(serve.stderr.take().expect("stderr")).lines();
    let addr: std::net::SocketAddr = stderr
        .by_ref()
        .map_while(|l| l.ok())
        .find_map(|l| {
            l.split("http://")
                .nth(1)
                .and_then(|rest| rest.strip_suffix("/metrics").map(str::to_string))
        })
        .expect("the metrics address")
        .parse()
        .expect("an address");
    // Keep reading: serve must not write into a closed pipe.
    std::thread::spawn(move || stderr.for_each(drop));
    let lag = || -> Option<f64> {
        let got = http_get::get(addr, "/metrics", &[]);
        got.body
            .lines()
            .find(|l| l.starts_with("hermes_fleet_sync_lag_seconds{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    eventually("a lag under the sync interval's scale", || {
        lag().is_some_and(|l| l < 5.0)
    });
    pg.stop();
    let down = hermes_meter_store::unix_now();
    eventually("the lag growing past the outage's length", || {
        lag().is_some_and(|l| l >= 2.0 && l >= hermes_meter_store::unix_now() - down - 1.0)
    });
    let status = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .args(["status", "--json"])
        .env("HERMES_METER_HOME", dir.path())
        .env(FLEET_URL_ENV, pg.url())
        .output()
        .expect("status");
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
    assert!(v["fleet"]["sync_lag_seconds"].as_f64().is_some_and(|l| l >= 2.0), "{v}");
    assert!(v["fleet"]["last_error"].is_string(), "{v}");
    pg.resume();
    let up = hermes_meter_store::unix_now();
    eventually("the lag back to a sync interval", || {
        host.synced_since(up) && lag().is_some_and(|l| l < 5.0)
    });
    let _ = serve.kill();
    let _ = serve.wait();
}

#[test]
fn the_fleet_schema_is_versioned_and_a_newer_one_is_refused() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().expect("dir");
    set_fleet_limit(&pg.url(), dir.path(), 5.0);
    assert_eq!(
        pg.psql("SELECT version FROM hermes_fleet_schema"),
        hermes_meter_runtime::fleet::schema::SCHEMA_VERSION.to_string()
    );
    // A build newer than this one migrated the fleet: this host refuses to
    // sync (and says why) rather than guess, and keeps its last view.
    pg.psql("UPDATE hermes_fleet_schema SET version = version + 1");
    let host = Host::start(dir.path(), &pg.url());
    eventually("the refusal in the sync state", || {
        host.store
            .fleet_status()
            .ok()
            .flatten()
            .and_then(|s| s.error)
            .is_some_and(|e| e.contains("newer than this build"))
    });
    assert!(host.status().synced_at.is_none());
}

#[test]
fn tls_and_passwords_work_as_libpq_users_expect() {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("certificate");
    let pg = Postgres::start_with(postgres::Options {
        password: Some("s3cret-pw".into()),
        tls: Some((ck.cert.pem(), ck.signing_key.serialize_pem())),
    });
    let dir = tempfile::tempdir().expect("dir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ck.cert.pem()).expect("write ca");
    let store = Outbox::open_dir(dir.path()).expect("store");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let step = |cfg: FleetConfig| -> Result<(), String> {
        let mut sync = hermes_meter_runtime::fleet::sync::FleetSync::new(cfg, dir.path());
        runtime
            .block_on(sync.step(&store, hermes_meter_store::unix_now()))
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let from = |pairs: Vec<(&'static str, String)>| {
        FleetConfig::from_vars(move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.into()))
            .expect("parse")
            .expect("set")
    };
    let verified = format!("{}?sslmode=verify-full&sslrootcert={}", pg.tcp_url(), ca.display());
    // libpq's way: the CA file in the URL, the password in PGPASSWORD.
    let good = from(vec![
        (FLEET_URL_ENV, verified.clone()),
        ("PGPASSWORD", "s3cret-pw".into()),
    ]);
    step(good.clone()).expect("a verified TLS connection with the password");
    let ssl: bool = runtime.block_on(async {
        let client = good.connect().await.expect("connect");
        let row = client
            .query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
            .await
            .expect("pg_stat_ssl");
        row.get(0)
    });
    assert!(ssl, "the connection is TLS");
    // The system's roots do not vouch for this server.
    let untrusted = FleetConfig::parse(&format!(
        "{}?sslmode=require",
        pg.tcp_url().replace("postgres@", "postgres:s3cret-pw@")
    ))
    .expect("url");
    let err = step(untrusted).expect_err("an unknown issuer is refused");
    assert!(err.contains("UnknownIssuer"), "{err}");
    assert!(!err.contains("s3cret-pw"), "{err}");
    // A wrong password is refused, and never repeated.
    let wrong = from(vec![(FLEET_URL_ENV, verified), ("PGPASSWORD", "wrong-pw".into())]);
    let err = step(wrong).expect_err("a wrong password is refused");
    assert!(err.contains("password"), "{err}");
    assert!(!err.contains("wrong-pw"), "{err}");
}

#[test]
fn a_cron_job_whose_fleet_budget_another_host_spent_is_paused_here() {
    let pg = Postgres::start();
    let (da, db) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let job = "0123456789ab";
    fleet_budget_set(&pg.url(), da.path(), &["cron", job, "daily", "0.05"]);
    let (mut a, mut b) = two_hosts(&pg, da.path(), db.path());
    // Host A runs the job until the fleet's budget for it is spent.
    a.cron_run(job);
    spend_until_hard(&mut a, &b, Scope::CronJob);
    // Host B never spent on the job; its next run of it is paused, its tool
    // calls blocked, with the texts of a local budget.
    b.cron_run(job);
    assert!(matches!(b.tool(), Some(Verdict::Block { message }) if message.starts_with("BUDGET-EXCEEDED")));
    let pauses = b.handle.take_pauses();
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    assert_eq!(pauses[0].job_id, job);
    assert!(
        pauses[0]
            .reason
            .starts_with(&format!("hermes-meter: cron {job} daily budget exhausted")),
        "{}",
        pauses[0].reason
    );
    assert_eq!(b.local().1, 0, "B spent nothing on it");
}

/// A token budget is the fleet's like a USD one: every host's tokens
/// count, the lease is in tokens, and a host that used none is stopped once
/// the others used the limit.
#[test]
fn a_token_budget_counts_every_hosts_tokens_and_leases_them() {
    let pg = Postgres::start();
    let (da, db) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    // Each call is 10,000 tokens (input, counted in `total`).
    fleet_budget_set(&pg.url(), da.path(), &["global", "daily_tokens", "35000"]);
    let (mut a, mut b) = two_hosts(&pg, da.path(), db.path());
    for _ in 0..2 {
        a.call().expect("under the fleet's limit");
    }
    a.wait_pushed();
    let t = hermes_meter_store::unix_now();
    eventually("B synced after A's calls", || b.synced_since(t));
    let seen = b.global();
    assert_eq!(seen.budget.unit, hermes_meter_model::budget::BudgetUnit::Tokens);
    assert_eq!(seen.spend.total(), 20_000.0, "A's tokens count on B: {seen:?}");
    let share = seen.fleet.expect("a fleet share");
    assert_eq!(share.own, 0.0, "B used none");
    // B's lease: the 15,000 tokens under the line, shared by two hosts.
    let lease: f64 = b
        .store
        .query_scalar("SELECT lease_tokens FROM fleet_view WHERE scope = 'global' AND win = 'daily'")
        .expect("lease");
    assert_eq!(lease, 7_500.0);
    assert_eq!(share.lease_left, 7_500.0);
    let text = budget_list(&pg.url(), db.path());
    assert!(text.contains("20.0k") || text.contains("20k"), "{text}");
    // A uses the rest; B, which used nothing, is stopped at its next sync.
    spend_until_hard(&mut a, &b, Scope::Global);
    let text = b.call().expect_err("the fleet's tokens are used up");
    assert!(text.contains("global daily_tokens"), "{text}");
    assert!(matches!(b.tool(), Some(Verdict::Block { .. })));
    assert_eq!(b.local().1, 0, "B made no call");
}

/// Two hosts of the fleet at `pg`, once both enforce its budgets and see
/// each other.
fn two_hosts(pg: &Postgres, a: &Path, b: &Path) -> (Host, Host) {
    let (a, b) = (Host::start(a, &pg.url()), Host::start(b, &pg.url()));
    eventually("two hosts enforcing the fleet's budget", || {
        [&a, &b]
            .iter()
            .all(|h| h.handle.enforcing() && h.store.fleet_status().ok().flatten().is_some_and(|s| s.hosts == 2))
    });
    (a, b)
}

/// Host `a` calls until its daily budget of `scope` is at the hard line
/// (waiting out its lease at each sync), then `b` syncs.
fn spend_until_hard(a: &mut Host, b: &Host, scope: Scope) {
    while a.daily(scope).level != hermes_meter_model::budget::Level::Hard {
        if a.call().is_err() {
            let synced = a.status().synced_at;
            eventually("A's next sync", || a.status().synced_at != synced);
        }
    }
    a.wait_pushed();
    let t = hermes_meter_store::unix_now();
    eventually("B synced after A's spend", || b.synced_since(t));
}

/// `hermes-meter budget list` on the host of `dir`, for the fleet.
fn budget_list(url: &str, dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .args(["budget", "list"])
        .env("HERMES_METER_HOME", dir)
        .env(FLEET_URL_ENV, url)
        .output()
        .expect("run hermes-meter");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn spend_and_hosts_no_window_reaches_leave_the_database() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().expect("dir");
    set_fleet_limit(&pg.url(), dir.path(), 5.0);
    let day = 86_400.0;
    let long_ago = hermes_meter_store::unix_now() - 45.0 * day;
    let recent = hermes_meter_store::unix_now() - 20.0 * day;
    pg.psql(&format!(
        "INSERT INTO hermes_fleet_hosts VALUES ('gone', 'old laptop', {long_ago}, {long_ago}), ('recent', 'x', {recent}, {recent});
         INSERT INTO hermes_fleet_spend VALUES ('global', '', {}, 'gone', 1, 0, 1), ('global', '', {}, 'recent', 1, 0, 1)",
        (long_ago as i64).div_euclid(900) * 900,
        (recent as i64).div_euclid(900) * 900
    ));
    let host = Host::start(dir.path(), &pg.url());
    host.wait_pushed();
    assert_eq!(
        pg.psql("SELECT string_agg(host_id, ',' ORDER BY host_id) FROM hermes_fleet_spend"),
        "recent"
    );
    let hosts = pg.psql("SELECT string_agg(host_id, ',' ORDER BY host_id) FROM hermes_fleet_hosts");
    assert!(!hosts.contains("gone") && hosts.contains("recent"), "{hosts}");
}

/// A fleet URL where no database listens: a socket directory with no socket.
fn unreachable_url(dir: &Path) -> String {
    format!("postgresql://postgres@/postgres?host={}&port=5432", dir.display())
}

/// Times `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// Spends on a host of its own until the fleet's global daily spend is
/// past `limit`, then lowers the limit there: the fleet is over its hard
/// line. Returns the fleet's spend.
fn fleet_over_the_line(pg: &Postgres, limit: f64) -> f64 {
    let dir = tempfile::tempdir().expect("dir");
    set_fleet_limit(&pg.url(), dir.path(), 100.0);
    let mut spender = Host::start(dir.path(), &pg.url());
    for _ in 0..4 {
        spender.call().expect("far under the limit");
    }
    spender.wait_pushed();
    set_fleet_limit(&pg.url(), dir.path(), limit);
    let (spent, _) = fleet_totals(pg);
    assert!(spent >= limit, "{spent} of {limit}");
    spent
}

#[test]
fn a_host_that_never_synced_blocks_its_first_call_when_the_fleet_is_over_the_line() {
    let pg = Postgres::start();
    fleet_over_the_line(&pg, 2.0 * CALL_USD);
    // A new host: no budget file, no fleet figures, never synced.
    let dir = tempfile::tempdir().expect("dir");
    assert!(!dir.path().join(BUDGETS_FILE_NAME).exists());
    let mut host = Host::start(dir.path(), &pg.url());
    let (first, took) = timed(|| host.call());
    let text = first.expect_err("the first LLM call is stopped: the fleet is over its line");
    assert!(text.starts_with("BUDGET-EXCEEDED"), "{text}");
    assert!(
        text.contains("global daily"),
        "the fleet's own budget, not the unsynced text: {text}"
    );
    assert!(took < FIRST_SYNC_WAIT, "it waited for the sync only: {took:?}");
    assert!(matches!(host.tool(), Some(Verdict::Block { .. })), "tool calls too");
    assert_eq!(host.local().1, 0, "nothing reached the provider");
    drop(host);

    // Restarted with the database down, the store decides from the fleet
    // figures its last sync left, without waiting.
    drop(pg);
    let mut host = Host::start(dir.path(), &unreachable_url(dir.path()));
    let (again, took) = timed(|| host.call());
    let text = again.expect_err("still over the line as last seen");
    assert!(text.contains("global daily"), "{text}");
    assert!(
        took < FIRST_SYNC_WAIT,
        "a store that synced before does not wait: {took:?}"
    );
}

#[test]
fn an_unreachable_fleet_fails_closed_within_the_bound_until_the_first_sync() {
    let dir = tempfile::tempdir().expect("dir");
    let url = unreachable_url(dir.path());
    let mut host = Host::start(dir.path(), &url);
    let (first, took) = timed(|| host.call());
    let text = first.expect_err("blocked: the fleet's budgets are unknown");
    assert!(text.starts_with("BUDGET-EXCEEDED"), "{text}");
    let name = FleetConfig::parse(&url).expect("url").redacted();
    assert!(text.contains(&name), "names the fleet: {text}");
    assert!(text.contains("could not reach"), "{text}");
    // The agent reads it: it is not told how to let calls through (the
    // operator's switch is documented, and `status` shows the fleet).
    assert!(!text.contains(UNSYNCED_ENV), "{text}");
    assert!(text.contains("not yours to change"), "{text}");
    assert!(took >= FIRST_SYNC_WAIT, "it waited for the sync: {took:?}");
    assert!(took < FIRST_SYNC_WAIT + Duration::from_secs(2), "bounded: {took:?}");
    // Only the first call waits; the next ones are blocked at once.
    let (tool, took) = timed(|| host.tool());
    assert!(matches!(tool, Some(Verdict::Block { message }) if message.contains(&name)));
    assert!(took < FIRST_SYNC_WAIT / 2, "{took:?}");
    assert_eq!(host.local().1, 0, "nothing reached the provider");
    // Counted and marked like any stop, and the stopped call holds no
    // reservation (it spends nothing).
    let store = hermes_meter_store::Writer::open_dir(dir.path()).expect("store");
    eventually("the stops counted", || {
        store.budget_verdict_counts().expect("counts").contains(&("blocked", 2))
    });
    assert_eq!(store.reserved_now().expect("reserved"), 0.0);
    let out = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .arg("status")
        .env("HERMES_METER_HOME", dir.path())
        .env(FLEET_URL_ENV, &url)
        .output()
        .expect("status");
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains("never yet: in enforce mode tool and LLM calls are blocked"),
        "{status}"
    );
    assert!(status.contains("fleet unsynced  closed (default"), "{status}");
}

#[test]
fn an_unreachable_fleet_fails_open_when_configured_so() {
    let dir = tempfile::tempdir().expect("dir");
    let mut host = Host::start_unsynced(dir.path(), &unreachable_url(dir.path()), Unsynced::Open);
    let (first, took) = timed(|| host.call());
    first.expect("open: the call goes ahead once the wait is over");
    assert!(took < FIRST_SYNC_WAIT + Duration::from_secs(2), "bounded: {took:?}");
    assert_eq!(host.tool(), None);
    assert_eq!(host.local().1, 1);
}

#[test]
fn budget_list_on_a_host_that_never_synced_shows_the_fleet_budget() {
    let pg = Postgres::start();
    let spent = fleet_over_the_line(&pg, 2.0 * CALL_USD);
    let dir = tempfile::tempdir().expect("dir");
    let list = |url: &str, json: bool| {
        let mut args = vec!["budget", "list"];
        if json {
            args.push("--json");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
            .args(&args)
            .env("HERMES_METER_HOME", dir.path())
            .env(FLEET_URL_ENV, url)
            .output()
            .expect("run hermes-meter");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let v: serde_json::Value = serde_json::from_str(&list(&pg.url(), true)).expect("json");
    assert_eq!(v["fleet"]["reached"], true, "{v}");
    let global = v["budgets"]
        .as_array()
        .expect("budgets")
        .iter()
        .find(|r| r["scope"] == "global" && r["window"] == "daily")
        .unwrap_or_else(|| panic!("the fleet's global daily budget: {v}"))
        .clone();
    assert!(
        (global["spend_usd"].as_f64().expect("spend") - spent).abs() < 1e-9,
        "{global}"
    );
    assert_eq!(global["verdict"], "hard", "{global}");

    // Where the fleet cannot be reached, the list says so.
    let other = tempfile::tempdir().expect("dir");
    let text = list(&unreachable_url(other.path()), false);
    assert!(text.contains("could not be reached"), "{text}");
}

#[test]
fn a_host_blocked_for_want_of_a_first_sync_goes_ahead_once_it_syncs() {
    let mut pg = Postgres::start();
    let seed = tempfile::tempdir().expect("dir");
    set_fleet_limit(&pg.url(), seed.path(), 100.0);
    pg.stop();
    let dir = tempfile::tempdir().expect("dir");
    let mut host = Host::start(dir.path(), &pg.url());
    let text = host
        .call()
        .expect_err("the database is down and this host never synced");
    assert!(text.contains("could not reach"), "{text}");
    pg.resume();
    eventually("the first sync", || host.synced_since(0.0));
    host.call().expect("far under the fleet's limit once synced");
    assert!(host.global().budget.limit == 100.0, "the fleet's budget file arrived");
}
