//! What the Hermes side of a store says: what the Hermes processes that
//! used it found of their Hermes (the `hermes` reports of `health.json`,
//! written by `python/hermes_meter/_integrations.py`), and the sessions
//! Hermes ran that the plugin did not record (Hermes's own `state.db`).
//! `status` prints it (`cli/status_hermes.rs`), the viewer opens with its
//! problems (`ui/`).
//!
//! Why both: a process where Hermes dropped the plugin (its load abandoned,
//! the plugin not enabled, an import that failed) runs no code of ours, so
//! it can report nothing itself; Hermes's session list is the outside view
//! that catches every such process, `hermes -z` and cron included.

use std::path::Path;

use hermes_meter_store::health::HermesReport;
use hermes_meter_store::hermes_state::HermesSession;
use hermes_meter_store::Reader;

use hermes_meter_model::display::ago;
use hermes_meter_store::unix_now as now;

/// How far back Hermes's sessions are compared with the ledger.
const LOOK_BACK_SECONDS: f64 = 7.0 * 86_400.0;

/// Sessions younger than this are not compared yet: their first hook may
/// still be on its way to the store (the bridge writes within milliseconds;
/// this leaves room for a busy store).
const GRACE_SECONDS: f64 = 10.0;

/// What `status` knows of the Hermes side.
pub struct HermesView {
    /// Newest first.
    pub(crate) reports: Vec<HermesReport>,
    pub(crate) unrecorded: Result<Unrecorded, String>,
}

pub(crate) struct Unrecorded {
    pub(crate) since: f64,
    /// Sessions Hermes ran in the window, and those the ledger lacks.
    pub(crate) compared: usize,
    pub(crate) missing: Vec<HermesSession>,
}

impl HermesView {
    /// Reads the reports and compares Hermes's sessions with the ledger.
    /// `hermes_home` `None`: Hermes's sessions are not compared (inside a
    /// Hermes process, see `hermes_meter_store::hermes_state`).
    pub fn look(store: &Reader, store_dir: &Path, hermes_home: Option<&Path>) -> HermesView {
        let mut reports = hermes_meter_store::health::read(store_dir)
            .ok()
            .flatten()
            .map(|r| r.hermes)
            .unwrap_or_default();
        reports.reverse();
        // The first process that reported (a dropped load reports too) may
        // be older than the store's file, which `status` itself may have
        // just created.
        let first_report = reports.iter().map(|r| r.started_at).fold(f64::INFINITY, f64::min);
        let unrecorded = match hermes_home {
            Some(home) => compare(store, store_dir, home, first_report),
            _ => Err("not compared inside a Hermes process (run `hermes-meter status`)".to_string()),
        };
        HermesView { reports, unrecorded }
    }

    /// What there is to say where no store exists yet (the plugin never
    /// recorded a hook here): every session Hermes ran in the look-back
    /// window is one it did not record.
    pub fn without_store(hermes_home: Option<&Path>) -> HermesView {
        let now = now();
        let since = now - LOOK_BACK_SECONDS;
        let unrecorded = match hermes_home {
            None => Err("not compared inside a Hermes process (run `hermes-meter status`)".to_string()),
            Some(home) => match hermes_meter_store::hermes_state::sessions_between(home, since, now - GRACE_SECONDS) {
                Ok(Some(missing)) => Ok(Unrecorded {
                    since,
                    compared: missing.len(),
                    missing,
                }),
                Ok(None) => Err(format!(
                    "no Hermes session database at {} (set HERMES_HOME to compare)",
                    home.join(hermes_meter_store::hermes_state::HERMES_STATE_FILE).display()
                )),
                Err(e) => Err(format!("Hermes's sessions not read: {e}")),
            },
        };
        HermesView {
            reports: Vec::new(),
            unrecorded,
        }
    }

    /// Whether Hermes ran something the plugin did not record: sessions
    /// it has no run of, or a load Hermes abandoned. `status` then fails.
    pub fn lost_recording(&self) -> bool {
        self.unrecorded.as_ref().is_ok_and(|u| !u.missing.is_empty()) || self.reports.iter().any(|r| r.abandoned())
    }

    /// The trouble, one line each, for the top of `status`.
    pub fn problems(&self) -> Vec<String> {
        let now = now();
        let mut out = Vec::new();
        if let Ok(u) = &self.unrecorded {
            if let Some(last) = u.missing.last() {
                out.push(format!(
                    "Hermes ran {} session(s) since {} that hermes-meter did not record (last: {} from {}, {}): \
                     the plugin was not running in their process; check `hermes plugins list` and \
                     $HERMES_HOME/logs/errors.log, and see \"Hermes\" below",
                    u.missing.len(),
                    ago(u.since, now),
                    hermes_meter_model::display::escape(&last.id),
                    hermes_meter_model::display::escape(&last.source),
                    ago(last.started_at, now),
                ));
            }
        }
        let abandoned: Vec<&HermesReport> = self.reports.iter().filter(|r| r.abandoned()).collect();
        if let Some(r) = abandoned.first() {
            out.push(format!(
                "Hermes abandoned loading the plugin in {} process(es) (last: pid {}, {}; register took {:.0} ms): \
                 they recorded nothing and enforced no budget; raise plugins.load_timeout_seconds in Hermes's \
                 config.yaml and report it",
                abandoned.len(),
                r.pid,
                ago(r.at, now),
                r.register_ms
            ));
        }
        if let Some(r) = self.reports.iter().find(|r| !r.abandoned()) {
            let missing: Vec<&str> = r.missing().map(|p| p.name.as_str()).collect();
            if !missing.is_empty() {
                out.push(format!(
                    "{} Hermes integration point(s) MISSING in the last Hermes process ({}): {}; see \"Hermes\" \
                     below for what is not recorded",
                    missing.len(),
                    version_text(r),
                    missing.join(", ")
                ));
            }
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        let unrecorded = match &self.unrecorded {
            Ok(u) => serde_json::json!({
                "since": u.since,
                "compared": u.compared,
                "missing": u.missing.iter().map(|s| serde_json::json!({
                    "session_id": s.id, "source": s.source, "started_at": s.started_at,
                })).collect::<Vec<_>>(),
            }),
            Err(why) => serde_json::json!({ "unknown": why }),
        };
        serde_json::json!({
            "problems": self.problems(),
            "reports": self.reports,
            "sessions": unrecorded,
        })
    }
}

pub(crate) fn version_text(r: &HermesReport) -> String {
    match &r.hermes_version {
        Some(v) => format!("Hermes {}", hermes_meter_model::display::escape(v)),
        None => "Hermes (version unknown)".into(),
    }
}

/// Hermes's sessions of the look-back window the ledger lacks.
fn compare(store: &Reader, store_dir: &Path, hermes_home: &Path, first_report: f64) -> Result<Unrecorded, String> {
    let now = now();
    // Not before the store existed or a process of the plugin first
    // reported: sessions Hermes ran before the plugin was installed are none
    // of its business.
    let created = std::fs::metadata(store_dir.join(hermes_meter_store::DB_FILE_NAME))
        .and_then(|m| m.created().or_else(|_| m.modified()))
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64());
    let since = (now - LOOK_BACK_SECONDS).max(created.unwrap_or(now).min(first_report) - 1.0);
    let until = now - GRACE_SECONDS;
    let sessions = match hermes_meter_store::hermes_state::sessions_between(hermes_home, since, until) {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(format!(
                "no Hermes session database at {} (set HERMES_HOME to compare)",
                hermes_home
                    .join(hermes_meter_store::hermes_state::HERMES_STATE_FILE)
                    .display()
            ))
        }
        Err(e) => return Err(format!("Hermes's sessions not read: {e}")),
    };
    let (recorded, _) = store
        .run_ids_started(since - 86_400.0, now + 60.0)
        .map_err(|e| e.to_string())?;
    let compared = sessions.len();
    let missing = sessions.into_iter().filter(|s| !recorded.contains(&s.id)).collect();
    Ok(Unrecorded {
        since,
        compared,
        missing,
    })
}
