//! `hermes-meter status`: where the store is and what it holds, and what
//! trouble it had (`<store>/health.json`, see [`hermes_meter_store::health`]).

use std::path::PathBuf;

use hermes_meter_runtime::config::Resolved;
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::{Reader, SCHEMA_VERSION};

/// This build's version, as `--version` prints it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The first line: what is wrong, in a few words each (the lines after it
/// say more), or that nothing is.
fn summary(
    damaged: bool,
    budget_file: Option<&str>,
    exposed: &[String],
    alerts: usize,
    hermes_problems: &[String],
    export: &hermes_meter_store::ExportState,
    config: &hermes_meter_runtime::export::ExportConfig,
) -> String {
    let now = hermes_meter_store::unix_now();
    let mut wrong = Vec::new();
    if damaged {
        wrong.push("the store is damaged".to_string());
    }
    if budget_file.is_some() {
        wrong.push("the budget file does not parse: its limits are not in force".to_string());
    }
    if !exposed.is_empty() {
        wrong.push("every user of this machine can change the limits".to_string());
    }
    if !hermes_problems.is_empty() {
        wrong.push(format!(
            "{} Hermes problem(s): runs not recorded or Hermes internals missing",
            hermes_problems.len()
        ));
    }
    let failing = match (export.last_error_at, export.last_success_at) {
        (Some(e), Some(ok)) => e > ok,
        (Some(_), None) => true,
        _ => false,
    };
    if config.enabled() && failing {
        wrong.push(format!(
            "trace export failing ({} spans waiting, last error {})",
            export.pending,
            hermes_meter_model::display::ago(export.last_error_at.unwrap_or(now), now)
        ));
    }
    let export_says = if !config.configured() {
        "export off (no OTLP endpoint configured)".to_string()
    } else if config.enabled() {
        format!(
            "exporting to {}",
            hermes_meter_model::display::escape(&config.endpoint.value)
        )
    } else {
        "export off".to_string()
    };
    let alerts_say = match alerts {
        0 => String::new(),
        n => format!("; {n} alert(s) in the last 24 h (see alerts below)"),
    };
    if wrong.is_empty() {
        format!("ok; {export_says}{alerts_say}")
    } else {
        format!("PROBLEMS: {}; {export_says}{alerts_say}", wrong.join("; "))
    }
}

/// `status` where the store directory does not exist: nothing was ever
/// recorded here. Says so, with the sessions Hermes ran that the plugin
/// therefore did not record; exit 1.
pub(super) fn run_without_store(home: &Resolved<PathBuf>, json: bool) -> Result<i32> {
    let hermes_home = hermes_meter_runtime::config::hermes_home().value;
    let hermes = crate::hermes_check::HermesView::without_store((!super::embedded()).then_some(hermes_home.as_path()));
    let problems = hermes.problems();
    let summary = format!(
        "PROBLEMS: no store yet at {}: hermes-meter has recorded nothing here{}",
        home.value.display(),
        if problems.is_empty() {
            String::new()
        } else {
            format!("; {} Hermes problem(s)", problems.len())
        }
    );
    if json {
        let value = serde_json::json!({
            "version": VERSION,
            "store": serde_json::Value::Null,
            "summary": summary,
            "hermes": hermes.json(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| Error::Other(e.to_string()))?
        );
        return Ok(1);
    }
    println!("summary         {summary}");
    for problem in problems {
        println!("PROBLEM         {problem}");
    }
    println!("hermes-meter    {VERSION}");
    println!(
        "store           none at {} (from {}): Hermes creates it at the plugin's first hook call; check \
         `hermes plugins list` and $HERMES_HOME/logs/errors.log",
        home.value.display(),
        home.source
    );
    Ok(1)
}

pub(super) fn run(store: &Reader, home: &Resolved<PathBuf>, json: bool) -> Result<i32> {
    let counts = store.counts()?;
    let version = store.schema_version()?;
    let export = store.export_state()?;
    let export_config =
        hermes_meter_runtime::export::ExportConfig::from_env(hermes_meter_runtime::export::ExportOverrides::default());
    let settings = settings_json(&export_config.describe());
    let retention = retention_state(store)?;
    let held = store.held_llm_calls(None)?;
    // Damage a process or `doctor` found, or a cheap look finds now (the
    // header, the schema, each table's first and last page), makes status
    // fail, first line.
    let damaged = damaged(&home.value).or_else(|| {
        let problems = hermes_meter_store::Doctor::new(store.path()).quick_look();
        let first = problems.first()?;
        Some(format!(
            "{} is damaged ({first}); {}",
            store.path().display(),
            hermes_meter_store::health::FaultKind::Corrupt.advice(store.path())
        ))
    });
    let read_only = hermes_meter_store::Doctor::new(store.path()).check_writable();
    // Inside a Hermes process Hermes's own database is not opened
    // (`hermes_meter_store::hermes_state`).
    let hermes_home = hermes_meter_runtime::config::hermes_home().value;
    let hermes = crate::hermes_check::HermesView::look(
        store,
        &home.value,
        (!super::embedded()).then_some(hermes_home.as_path()),
    );
    // Damage, or anything Hermes ran that was not recorded, fails it.
    let code = i32::from(damaged.is_some() || hermes.lost_recording());
    // The budget file, read once: its runaway watch, or why it does not parse.
    let watch = runaway(&home.value);
    let budget_file = watch.as_ref().err().cloned();
    let alerts = store.recent_alerts(
        hermes_meter_store::unix_now() - super::deliveries::RECENT_ALERTS_S,
        super::deliveries::RECENT_ALERTS_MAX,
    )?;
    let alert_count = alerts.len();
    let exposed: Vec<String> = hermes_meter_runtime::budget::world_writable(&home.value)
        .iter()
        .map(|p| hermes_meter_model::display::escape(p).into_owned())
        .collect();
    if json {
        let value = serde_json::json!({
            "version": VERSION,
            "store": { "path": store.path(), "dir_source": home.source.to_string(), "schema_version": version,
                       "supported_schema_version": SCHEMA_VERSION, "damaged": damaged,
                       "read_only": read_only, "old_store": old_store(&home.value) },
            "rows": counts,
            "held_llm_calls": held,
            "retention": retention.json(),
            "export": export,
            "export_settings": settings,
            "health": health_json(&home.value),
            "summary": summary(damaged.is_some(), budget_file.as_deref(), &exposed, alert_count, &hermes.problems(), &export, &export_config),
            "hermes": hermes.json(),
            "limits": { "world_writable": exposed, "editable_here": hermes_meter_runtime::budget::editable_here(&home.value) },
            "spool": spool_json(&home.value),
            "metrics": super::metrics_status::json(store)?,
            "logs": super::logs_status::json(store)?,
            "fleet": fleet_json(store)?,
            "alert_webhook": super::deliveries::webhook_json(store)?,
            "alert_delivery": super::deliveries::delivery_json(store)?,
            "digests": super::deliveries::digests_json(store)?,
            "recent_alerts": super::deliveries::recent_alerts_json(&alerts),
            "runaway": watch.as_ref().map(super::budget::runaway_json).unwrap_or_else(|e| serde_json::json!({"error": e})),
        });
        let text = serde_json::to_string_pretty(&value).map_err(|e| Error::Other(e.to_string()))?;
        println!("{text}");
        return Ok(code);
    }
    println!(
        "summary         {}",
        summary(
            damaged.is_some(),
            budget_file.as_deref(),
            &exposed,
            alert_count,
            &hermes.problems(),
            &export,
            &export_config
        )
    );
    // Damage first: the first line says what is wrong and what to do.
    if let Some(text) = &damaged {
        println!("DAMAGED         {text}");
    }
    if let Some(text) = &budget_file {
        println!("BUDGETS         {text}");
    }
    for text in &exposed {
        println!("LIMITS          {text}");
    }
    if hermes_meter_runtime::budget::editable_here(&home.value) == Some(true) {
        println!(
            "limits          this user can change them: an agent running as it is refused only by the plugin's \
             gate (docs/budgets-and-fleet.md, \"A brake the agent cannot lift\", keeps them out of its reach)"
        );
    }
    for problem in hermes.problems() {
        println!("PROBLEM         {problem}");
    }
    println!("hermes-meter    {VERSION}");
    println!("store           {} (from {})", store.path().display(), home.source);
    if let Some(why) = &read_only {
        println!("read-only       {why}: read as it is; Hermes cannot record into it until it is writable");
    }
    println!("schema version  {version} (this build: {SCHEMA_VERSION})");
    print_old_store(&home.value);
    println!("journal         {} events", counts.journal);
    println!("runs            {}", counts.runs);
    println!("turns           {}", counts.turns);
    println!("llm calls       {}", counts.llm_calls);
    if held > 0 {
        println!(
            "held llm calls  {held} (usage beyond what any provider bills in one call: kept out of costs and budgets; \
             `hermes-meter held list`, `hermes-meter held confirm ID`)"
        );
    }
    println!("api errors      {}", counts.llm_call_errors);
    // As `report` counts them: the row a subagent's result records on its
    // parent is no tool call (the parent's delegate_task is).
    let subagent_rows: i64 = if counts.subagent_edges > 0 {
        store.query_scalar("SELECT COUNT(*) FROM tool_calls WHERE proxy = 1")?
    } else {
        0
    };
    if subagent_rows > 0 {
        println!(
            "tool calls      {} (and {subagent_rows} subagent result row(s), which no report counts)",
            counts.tool_calls - subagent_rows
        );
    } else {
        println!("tool calls      {}", counts.tool_calls);
    }
    println!("subagent edges  {}", counts.subagent_edges);
    println!("repaired kwargs {}", counts.decode_problems);
    retention.print();
    print_health(&home.value);
    let counts = hermes_meter_store::health::read(&home.value)
        .ok()
        .flatten()
        .map(|r| r.counts)
        .unwrap_or_default();
    super::status_hermes::print(&hermes, &counts);
    print_export(&export, &export_config);
    super::metrics_status::print(store)?;
    super::logs_status::print(store)?;
    print_fleet(store)?;
    super::deliveries::print_webhook(store)?;
    super::deliveries::print(store)?;
    super::deliveries::print_recent_alerts(&alerts);
    match &watch {
        Ok(r) => println!("runaway watch   {}", r.describe()),
        Err(e) => println!("runaway watch   {e}"),
    }
    Ok(code)
}

/// The runaway watch of the store's budget file (its defaults without one).
fn runaway(home: &std::path::Path) -> std::result::Result<hermes_meter_model::budget::RunawayConfig, String> {
    hermes_meter_runtime::config::load_budgets(&home.join(hermes_meter_model::budget::BUDGETS_FILE_NAME))
        .map(|c| c.runaway)
        .map_err(|e| {
            format!(
                "the budget file does not parse ({}): a Hermes process started since holds every tool and LLM \
                 call until it is fixed (in observe mode it holds nothing), one started before keeps the limits \
                 it loaded",
                hermes_meter_model::display::escape(&e.to_string())
            )
        })
}

/// The fleet's address (never its password), this host, the last sync and
/// the sync lag; `None` without `HERMES_METER_FLEET_URL`.
fn fleet_json(store: &Reader) -> Result<serde_json::Value> {
    let cfg = match hermes_meter_runtime::fleet::FleetConfig::from_env() {
        Ok(Some(cfg)) => cfg,
        Ok(None) => return Ok(serde_json::Value::Null),
        Err(e) => return Ok(serde_json::json!({ "error": e.to_string() })),
    };
    let now = hermes_meter_store::unix_now();
    let st = store.fleet_status()?;
    let unsynced = hermes_meter_runtime::config::fleet::unsynced();
    Ok(serde_json::json!({
        "url": cfg.redacted(),
        "unsynced": unsynced.value.as_str(),
        "unsynced_source": unsynced.source.to_string(),
        "host_id": st.as_ref().map(|s| s.host_id.clone()),
        "synced_at": st.as_ref().and_then(|s| s.synced_at),
        "sync_lag_seconds": st.as_ref().and_then(|s| s.lag_seconds(now)),
        "hosts": st.as_ref().map(|s| s.hosts),
        "budgets_version": st.as_ref().and_then(|s| s.budgets_version),
        "last_error": st.as_ref().and_then(|s| s.error.clone()),
    }))
}

fn print_fleet(store: &Reader) -> Result<()> {
    let v = fleet_json(store)?;
    if v.is_null() {
        println!("fleet           off (budgets are this store's; set HERMES_METER_FLEET_URL to share them)");
        return Ok(());
    }
    if let Some(e) = v["error"].as_str() {
        println!("fleet           not usable: {e}");
        return Ok(());
    }
    println!("fleet           {}", v["url"].as_str().unwrap_or(""));
    match v["sync_lag_seconds"].as_f64() {
        Some(lag) => println!(
            "fleet sync      {lag:.1} s ago (lag), {} live hosts, this host {}",
            v["hosts"],
            v["host_id"].as_str().unwrap_or("")
        ),
        None if v["unsynced"] == hermes_meter_model::budget::Unsynced::Closed.as_str() => println!(
            "fleet sync      never yet: in enforce mode tool and LLM calls are blocked until the first sync \
             (the first call waits up to {} s for it)",
            hermes_meter_model::budget::FIRST_SYNC_WAIT.as_secs()
        ),
        None => println!(
            "fleet sync      never yet: the fleet's budgets are unknown; calls go ahead on this store's alone \
             (after the first call waits up to {} s for the sync)",
            hermes_meter_model::budget::FIRST_SYNC_WAIT.as_secs()
        ),
    }
    println!(
        "fleet unsynced  {} ({}; {}=closed|open: what a host that never synced does)",
        v["unsynced"].as_str().unwrap_or(""),
        v["unsynced_source"].as_str().unwrap_or(""),
        hermes_meter_model::budget::UNSYNCED_ENV
    );
    if let Some(e) = v["last_error"].as_str() {
        println!(
            "fleet trouble   {} (enforcing on the last fleet totals plus this host's spend since)",
            hermes_meter_model::display::escape(e)
        );
    }
    Ok(())
}

/// Retention settings and what the writers' sweeps pruned so far.
struct RetentionState {
    settings: hermes_meter_runtime::config::Retention,
    journal: i64,
    outbox: i64,
    content: i64,
    requests: i64,
    refused: i64,
    horizon: Option<f64>,
    /// How far `report`'s rollups hold (Unix seconds, 0: not yet).
    rolled_until: i64,
}

fn retention_state(store: &Reader) -> Result<RetentionState> {
    use hermes_meter_store::pruned;
    let mut warnings = Vec::new();
    Ok(RetentionState {
        settings: hermes_meter_runtime::config::Retention::from_env(&mut warnings),
        journal: store.store_count(pruned::JOURNAL)?,
        outbox: store.store_count(pruned::OUTBOX)?,
        content: store.store_count(pruned::CONTENT)?,
        requests: store.store_count(pruned::REQUESTS)?,
        refused: store.store_count(pruned::REFUSED)?,
        horizon: store.journal_horizon()?,
        rolled_until: store.rolled_until()?,
    })
}

impl RetentionState {
    fn json(&self) -> serde_json::Value {
        let settings: Vec<_> = self
            .settings
            .describe()
            .into_iter()
            .map(|(name, value, source)| serde_json::json!({"name": name, "value": value, "source": source}))
            .collect();
        serde_json::json!({
            "settings": settings,
            "pruned": {
                "journal": self.journal,
                "outbox": self.outbox,
                "content": self.content,
                "finished_requests": self.requests,
            },
            "refused_too_old": self.refused,
            "journal_horizon": self.horizon,
            "report_rolled_until": self.rolled_until,
        })
    }

    fn print(&self) {
        let s = &self.settings;
        println!(
            "retention       journal {} days, unsent spans {} days, captured content {} hours",
            s.journal_days.value, s.outbox_days.value, s.content_hours.value
        );
        println!(
            "  pruned        {} journal rows, {} spans never accepted, {} content rows, {} finished requests",
            self.journal, self.outbox, self.content, self.requests
        );
        if let Some(h) = self.horizon {
            let at = jiff::Timestamp::from_microsecond((h * 1e6) as i64)
                .map(|t| t.to_string())
                .unwrap_or_default();
            println!(
                "  horizon       events before {at} are refused ({} so far): their keys were pruned",
                self.refused
            );
        }
        let rolled = jiff::Timestamp::from_second(self.rolled_until)
            .map(|t| t.to_string())
            .unwrap_or_default();
        if self.rolled_until > 0 {
            println!("  rollups       report sums up to {rolled}; later calls are read from the ledger");
        } else {
            println!("  rollups       none yet: report reads the ledger (a running Hermes builds them)");
        }
    }
}

/// The damage recorded in `<store>/health.json` and not repaired since
/// (a writer that hit a damaged page, or `doctor`), with what to do.
fn damaged(dir: &std::path::Path) -> Option<String> {
    let record = hermes_meter_store::health::read(dir).ok().flatten()?;
    let fault = record
        .last_fault
        .filter(|f| f.kind == hermes_meter_store::health::FaultKind::Corrupt)?;
    if record.state != "fault" {
        return None;
    }
    let db = dir.join(hermes_meter_store::DB_FILE_NAME);
    Some(format!("{}; {}", fault.message, fault.kind.advice(&db)))
}

/// Status of a store that cannot be opened: what is wrong, what the bridges
/// recorded about it, and what waits in the spool. Exits 1.
pub(crate) fn run_unopenable(home: &Resolved<PathBuf>, error: &Error, json: bool) -> Result<i32> {
    let db = home.value.join(hermes_meter_store::DB_FILE_NAME);
    let kind = hermes_meter_store::health::classify(error).map(|k| k.as_str());
    if json {
        let value = serde_json::json!({
            "version": VERSION,
            "store": { "path": db, "dir_source": home.source.to_string(), "error": error.to_string(), "fault": kind,
                       "old_store": old_store(&home.value) },
            "health": health_json(&home.value),
            "spool": spool_json(&home.value),
        });
        let text = serde_json::to_string_pretty(&value).map_err(|e| Error::Other(e.to_string()))?;
        println!("{text}");
        return Ok(1);
    }
    println!("hermes-meter    {VERSION}");
    println!("store           {} (from {})", db.display(), home.source);
    println!(
        "error           cannot open it ({}): {error}",
        kind.unwrap_or("unknown")
    );
    if let Some(kind) = hermes_meter_store::health::classify(error) {
        println!("what to do      {}", kind.advice(&db));
    }
    print_old_store(&home.value);
    print_health(&home.value);
    Ok(1)
}

/// The store a pre-release build kept under its old name, beside this one
/// (`$HERMES_HOME/otel`), which this build never reads.
fn old_store(dir: &std::path::Path) -> Option<PathBuf> {
    let old = dir.parent()?.join("otel").join("hermes-otel.db");
    (dir.file_name()? == "meter" && old.is_file()).then_some(old)
}

fn print_old_store(dir: &std::path::Path) {
    if let Some(old) = old_store(dir) {
        println!(
            "old store       {}: a pre-release build's (hermes-otel), not read by this one; \
             keep it for reference or delete its directory",
            old.display()
        );
    }
}

fn health_json(dir: &std::path::Path) -> serde_json::Value {
    match hermes_meter_store::health::read(dir) {
        Ok(Some(record)) => serde_json::to_value(record).unwrap_or(serde_json::Value::Null),
        Ok(None) => serde_json::Value::Null,
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

/// Spool files waiting to be applied: `(files, bytes)`.
fn spool_files(dir: &std::path::Path) -> (usize, u64) {
    let Ok(entries) = std::fs::read_dir(dir.join(hermes_meter_runtime::spool::SPOOL_DIR_NAME)) else {
        return (0, 0);
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .fold((0, 0), |(n, b), e| {
            (n + 1, b + e.metadata().map(|m| m.len()).unwrap_or(0))
        })
}

fn spool_json(dir: &std::path::Path) -> serde_json::Value {
    let (files, bytes) = spool_files(dir);
    serde_json::json!({ "files": files, "bytes": bytes })
}

fn print_health(dir: &std::path::Path) {
    let (files, bytes) = spool_files(dir);
    println!("spool           {files} file(s), {bytes} bytes (live processes' and not yet recovered)");
    let record = match hermes_meter_store::health::read(dir) {
        Ok(Some(r)) => r,
        Ok(None) => {
            println!("health          no store trouble recorded");
            return;
        }
        Err(e) => {
            println!("health          unreadable: {e}");
            return;
        }
    };
    let now = hermes_meter_store::unix_now();
    let ago = |t: f64| hermes_meter_model::display::ago(t, now);
    println!(
        "health          {} (reported by pid {}, {})",
        record.state,
        record.updated_by_pid,
        ago(record.updated_at)
    );
    if let Some(f) = &record.last_fault {
        // What to do, from the fault's kind, while the store is in it.
        let advice = if record.state == "fault" {
            format!("; {}", f.kind.advice(&dir.join(hermes_meter_store::DB_FILE_NAME)))
        } else {
            String::new()
        };
        println!(
            "  last fault    {} {} (pid {}): {}{advice}",
            f.kind.as_str(),
            ago(f.at),
            f.pid,
            f.message
        );
    }
    if let Some(t) = record.last_recovery_at {
        println!("  recovered     {}", ago(t));
    }
    let c = &record.counts;
    println!(
        "  counts        {} faults, {} failed commits (events kept and retried), {} failed opens, \
         {} spool write failures, {} events dropped, {} recoveries",
        c.store_faults, c.failed_commits, c.open_failures, c.spool_write_failures, c.dropped_events, c.recoveries
    );
    // Which processes lost events, and why: a count alone cannot say
    // whether the loss is old news or the last run.
    for l in &record.lost {
        println!(
            "  lost events   pid {} (started {}), {}: {} hook events could not be saved ({})",
            l.pid,
            ago(l.started_at),
            ago(l.at),
            l.count,
            l.reason
        );
    }
}

fn print_export(state: &hermes_meter_store::ExportState, config: &hermes_meter_runtime::export::ExportConfig) {
    let now = hermes_meter_store::unix_now();
    let ago = |t: Option<f64>| t.map_or("never".to_string(), |t| hermes_meter_model::display::ago(t, now));
    println!("export");
    if !config.configured() {
        println!(
            "  off           no OTLP endpoint configured: nothing is sent (set {} to send traces, metrics \
             and logs); spans wait in the store up to its outbox cap",
            hermes_meter_runtime::config::export::env::ENDPOINT
        );
    }
    println!(
        "  pending       {} spans ({} held for their session's grace period), oldest {}",
        state.pending,
        state.held,
        ago(state.oldest_pending_at)
    );
    println!("  exported      {}", state.exported);
    println!("  dropped       {} (retention cap)", state.dropped);
    println!("  rejected      {} (by the collector)", state.rejected);
    println!("  sampled out   {}", state.sampled_out);
    println!("  failed        {} attempts (timeouts included)", state.failed);
    print_outcome(
        now,
        state.last_success_at,
        state.last_error.as_deref(),
        state.last_error_at,
        state.lease.as_ref(),
    );
    print_settings("export settings", 22, &config.describe(), &config.warnings);
}

/// The last success, last error and lease lines every exporter section has.
pub(super) fn print_outcome(
    now: f64,
    last_success_at: Option<f64>,
    last_error: Option<&str>,
    last_error_at: Option<f64>,
    lease: Option<&hermes_meter_store::Lease>,
) {
    let ago = |t: Option<f64>| t.map_or("never".to_string(), |t| hermes_meter_model::display::ago(t, now));
    println!("  last success  {}", ago(last_success_at));
    if let Some(e) = last_error {
        // A collector's answer is quoted in it: shown escaped.
        println!(
            "  last error    {} ({})",
            hermes_meter_model::display::escape(e),
            ago(last_error_at)
        );
    }
    match lease {
        Some(l) if l.expires_at >= now => {
            println!("  lease         {} (expires in {:.0} s)", l.holder, l.expires_at - now)
        }
        Some(l) => println!("  lease         free (last held by {})", l.holder),
        None => println!("  lease         free"),
    }
}

/// Settings rows as `status --json` shows them.
pub(super) fn settings_json(rows: &[(&str, String, String)]) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|(name, value, source)| serde_json::json!({"name": name, "value": value, "source": source}))
        .collect()
}

/// A settings block: each value with where it came from, then warnings.
pub(super) fn print_settings(title: &str, width: usize, rows: &[(&str, String, String)], warnings: &[String]) {
    println!("{title}");
    // At least one space after the longest name, whatever `width` says.
    let width = rows.iter().map(|(n, _, _)| n.len() + 1).max().unwrap_or(0).max(width);
    for (name, value, source) in rows {
        println!("  {name:<width$}{value} (from {source})");
    }
    for warning in warnings {
        println!("  warning: {warning}");
    }
}
