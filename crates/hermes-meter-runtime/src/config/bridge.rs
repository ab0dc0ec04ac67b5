//! The per-process runtime's settings ([`BridgeConfig`]): the store
//! directory, how long a hook waits, the budget mode, the writer's
//! intervals, retention, and the export settings the writer's sweep shares
//! with the exporter (idle time, outbox cap, session grace, content
//! capture: taken from the one [`ExportConfig`] resolution, so the writer
//! and the exporter cannot disagree).
//!
//! Owns: resolving them from a lookup, with a warning for each value that
//! does not parse. Must not touch: the runtime (`bridge/` receives the
//! resolved value), the store, the network.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::export::{ExportConfig, ExportOverrides};
use super::metrics::{MetricsConfig, MetricsOverrides};
use super::parse::parse_non_negative;
use super::store::{store_dir_from, Retention};
use hermes_meter_model::budget::BudgetMode;
use hermes_meter_model::hook::DecodeOptions;

/// Environment variables the bridge reads (besides the store's and the export settings it shares).
pub mod env {
    /// How long a hook waits for its commit, in milliseconds (0: never wait).
    pub(crate) const HOOK_WAIT_MS: &str = "HERMES_METER_HOOK_WAIT_MS";
    /// `enforce` (the default) or `observe`: whether budgets may block.
    pub(crate) const BUDGET_MODE: &str = "HERMES_METER_BUDGET_MODE";
    /// `on` (the default) or `off`: whether the agent gets the read-only
    /// `meter_spend` tool.
    pub(crate) const AGENT_TOOL: &str = "HERMES_METER_AGENT_TOOL";
    /// Test-only: the name of a hook whose Rust path panics (`*`: every
    /// hook). Read only by a build with the `test-hooks` feature.
    pub const TEST_PANIC: &str = "HERMES_METER_TEST_PANIC";
}

/// How long a hook waits for its commit by default. Commits take tens of
/// microseconds; a wait this long means the store is locked by another
/// process, and Hermes must not stall on that.
pub(crate) const DEFAULT_HOOK_WAIT: Duration = Duration::from_millis(100);

/// How often the writer checkpoints the WAL when there were writes. A
/// passive checkpoint of a second's worth of events is a few milliseconds
/// and keeps the WAL (which every reader scans) small.
pub(crate) const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// How often the writer closes runs that went idle without ending.
pub(crate) const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// The first wait before the store is tried again after a fault.
pub(crate) const DEFAULT_STORE_RETRY_MIN: Duration = Duration::from_millis(250);

/// The longest wait between tries of a store in trouble: a fault that
/// lasts costs one open attempt this often, on the writer thread.
pub const DEFAULT_STORE_RETRY_MAX: Duration = Duration::from_secs(30);

/// Everything the bridge needs, resolved once.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The store directory.
    pub store_dir: PathBuf,
    /// How long a hook waits for its commit; zero means never.
    pub hook_wait: Duration,
    /// How decoding treats content.
    pub decode: DecodeOptions,
    /// Whether gating hooks are registered and may block.
    pub budget_mode: BudgetMode,
    /// Whether the plugin registers the agent's `meter_spend` tool
    /// (`HERMES_METER_AGENT_TOOL`).
    pub agent_tool: bool,
    /// The mode `HERMES_METER_BUDGET_MODE` sets, when it is set and valid:
    /// it overrides the budget file's `mode` in the gate.
    pub budget_mode_override: Option<BudgetMode>,
    /// Whether budgets count the fleet's spend (`HERMES_METER_FLEET_URL`
    /// set, not empty).
    pub fleet: bool,
    /// What fleet budgets do before this store's first fleet sync, once
    /// the first gated call's wait is over (`HERMES_METER_FLEET_UNSYNCED`).
    pub fleet_unsynced: hermes_meter_model::budget::Unsynced,
    /// Between WAL checkpoints.
    pub checkpoint_interval: Duration,
    /// Between idle-run sweeps.
    pub sweep_interval: Duration,
    /// A run with no event for this long is closed as abandoned.
    pub idle_run_seconds: f64,
    /// The hook whose Rust path panics (the `test-hooks` build only).
    #[cfg(feature = "test-hooks")]
    pub test_panic_hook: Option<String>,
    /// What was wrong with the environment, for the binding to log once.
    pub warnings: Vec<String>,
    /// The first wait before a store in trouble is tried again.
    pub store_retry_min: Duration,
    /// The longest wait between tries (the wait doubles up to this).
    pub store_retry_max: Duration,
    /// The Hermes profile that started the bridge (the first
    /// `ctx.profile_name`), recorded on runs whose calls name no profile of
    /// their own (per-profile budgets); `None` when unknown. Calls of a
    /// multi-profile gateway carry their profile in their spool record.
    pub profile: Option<String>,
    /// What the writer's sweep prunes, and when.
    pub retention: Retention,
    /// The outbox cap (`HERMES_METER_OUTBOX_MAX_ROWS`), enforced by the
    /// sweep too, so it holds with trace export off.
    pub outbox_max_rows: u64,
    /// How long after its end a session counts as settled for metrics
    /// (`HERMES_METER_SESSION_GRACE_SECONDS`), for the sweep's fold.
    pub session_grace_seconds: f64,
    /// The trace export settings, resolved with the rest: the export
    /// thread (`export_task.rs`) takes them from here.
    pub export: ExportConfig,
    /// The metric export settings, likewise.
    pub metrics: MetricsConfig,
    /// The log export settings, likewise.
    pub logs: ExportConfig,
}

impl BridgeConfig {
    /// The configuration for `store_dir` with every other setting at its default.
    pub fn new(store_dir: PathBuf) -> Self {
        let export = ExportConfig::resolve(ExportOverrides::default(), |_| None);
        BridgeConfig {
            store_dir,
            hook_wait: DEFAULT_HOOK_WAIT,
            decode: DecodeOptions::default(),
            budget_mode: BudgetMode::Enforce,
            agent_tool: true,
            budget_mode_override: None,
            fleet: false,
            fleet_unsynced: hermes_meter_model::budget::Unsynced::default(),
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            idle_run_seconds: super::DEFAULT_IDLE_TIMEOUT_SECONDS,
            #[cfg(feature = "test-hooks")]
            test_panic_hook: None,
            warnings: Vec::new(),
            store_retry_min: DEFAULT_STORE_RETRY_MIN,
            store_retry_max: DEFAULT_STORE_RETRY_MAX,
            profile: None,
            retention: Retention::defaults(),
            outbox_max_rows: export.outbox_max_rows.value,
            session_grace_seconds: export.session_grace_seconds.value,
            export,
            metrics: MetricsConfig::resolve(ExportOverrides::default(), MetricsOverrides::default(), |_| None),
            logs: ExportConfig::resolve_logs(ExportOverrides::default(), |_| None),
        }
    }

    /// Resolves the export settings and takes the outbox cap and the
    /// session grace from them (one place resolves them).
    fn with_export_settings(mut self, var: impl Fn(&str) -> Option<String>) -> Self {
        let export = ExportConfig::resolve(ExportOverrides::default(), &var);
        self.metrics = MetricsConfig::resolve(ExportOverrides::default(), MetricsOverrides::default(), &var);
        self.logs = ExportConfig::resolve_logs(ExportOverrides::default(), &var);
        self.outbox_max_rows = export.outbox_max_rows.value;
        self.session_grace_seconds = export.session_grace_seconds.value;
        self.export = export;
        self
    }

    /// Resolves the configuration from the process environment (empty
    /// variables count as unset).
    pub fn from_env() -> Self {
        Self::from_vars(super::process_var_set)
    }

    /// Resolves the configuration from any environment (tests pass a map).
    /// Each setting: its variable if set and valid, else the default; an
    /// invalid value is reported in `warnings` and the default used.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let mut cfg = BridgeConfig::new(store_dir_from(None, &var).value);
        cfg.decode.capture_content = super::capture_content_from(&var).value;
        if let Some(v) = var(env::HOOK_WAIT_MS) {
            match v.to_string_lossy().trim().parse::<u64>() {
                Ok(ms) => cfg.hook_wait = Duration::from_millis(ms),
                Err(_) => cfg.warnings.push(format!(
                    "{}={:?} is not a number of milliseconds; using {} ms",
                    env::HOOK_WAIT_MS,
                    v,
                    DEFAULT_HOOK_WAIT.as_millis()
                )),
            }
        }
        if let Some(v) = var(env::BUDGET_MODE) {
            match BudgetMode::parse(&v.to_string_lossy()) {
                Some(mode) => {
                    cfg.budget_mode = mode;
                    cfg.budget_mode_override = Some(mode);
                }
                None => cfg.warnings.push(format!(
                    "{}={:?} is neither observe nor enforce; using enforce",
                    env::BUDGET_MODE,
                    v
                )),
            }
        }
        if let Some(v) = var(env::AGENT_TOOL) {
            match v.to_string_lossy().trim().to_ascii_lowercase().as_str() {
                "on" | "1" | "true" | "yes" => cfg.agent_tool = true,
                "off" | "0" | "false" | "no" => cfg.agent_tool = false,
                _ => cfg.warnings.push(format!(
                    "{}={:?} is neither on nor off; the agent's meter_spend tool stays on",
                    env::AGENT_TOOL,
                    v
                )),
            }
        }
        // The writer's idle sweep and the exporter's close runs after the
        // same idle time: one setting, one parser.
        let idle = super::export::env::IDLE_TIMEOUT_SECONDS;
        if let Some(v) = var(idle) {
            match parse_non_negative(&v.to_string_lossy()) {
                Some(seconds) => cfg.idle_run_seconds = seconds,
                None => cfg.warnings.push(format!(
                    "{idle}={v:?} is not a number of seconds; using {}",
                    super::DEFAULT_IDLE_TIMEOUT_SECONDS
                )),
            }
        }
        cfg.fleet = var(super::fleet::FLEET_URL_ENV).is_some_and(|v| !v.is_empty());
        let text_var = |name: &str| var(name).map(|v| v.to_string_lossy().into_owned());
        cfg.fleet_unsynced = super::fleet::unsynced_from(None, &text_var, &mut cfg.warnings).value;
        #[cfg(feature = "test-hooks")]
        {
            cfg.test_panic_hook = var(env::TEST_PANIC).map(|v| v.to_string_lossy().into_owned());
        }
        cfg.retention = Retention::from_vars(&var, &mut cfg.warnings);
        cfg.with_export_settings(|name| var(name).map(|v| v.to_string_lossy().into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_environment_with_defaults() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
        };
        let cfg = BridgeConfig::from_vars(vars(&[("HERMES_METER_HOME", "/s")]));
        assert_eq!(cfg.store_dir, PathBuf::from("/s"));
        assert_eq!(cfg.hook_wait, DEFAULT_HOOK_WAIT);
        assert_eq!(cfg.budget_mode, BudgetMode::Enforce);
        assert_eq!(cfg.budget_mode_override, None);
        assert!(!cfg.fleet);
        assert!(cfg.agent_tool, "the agent's tool is on by default");
        assert!(cfg.warnings.is_empty());
        let cfg = BridgeConfig::from_vars(vars(&[
            ("HERMES_METER_HOOK_WAIT_MS", "5"),
            ("HERMES_METER_BUDGET_MODE", "Observe"),
            ("HERMES_METER_TEST_PANIC", "post_tool_call"),
            ("HERMES_METER_AGENT_TOOL", " Off"),
        ]));
        assert_eq!(cfg.hook_wait, Duration::from_millis(5));
        assert!(!cfg.agent_tool);
        assert_eq!(cfg.budget_mode, BudgetMode::Observe);
        assert_eq!(cfg.budget_mode_override, Some(BudgetMode::Observe));
        #[cfg(feature = "test-hooks")]
        assert_eq!(cfg.test_panic_hook.as_deref(), Some("post_tool_call"));
        let cfg = BridgeConfig::from_vars(vars(&[
            ("HERMES_METER_HOOK_WAIT_MS", "soon"),
            ("HERMES_METER_BUDGET_MODE", "strict"),
            ("HERMES_METER_AGENT_TOOL", "maybe"),
        ]));
        assert_eq!(cfg.hook_wait, DEFAULT_HOOK_WAIT);
        assert!(cfg.agent_tool, "an invalid value keeps the default");
        assert_eq!(cfg.budget_mode, BudgetMode::Enforce);
        assert_eq!(cfg.budget_mode_override, None, "an invalid mode overrides nothing");
        assert_eq!(cfg.warnings.len(), 3);
    }

    #[test]
    fn the_fleet_is_on_when_its_url_is_set() {
        let with = |url: &'static str| {
            BridgeConfig::from_vars(move |k| (k == crate::config::fleet::FLEET_URL_ENV).then(|| OsString::from(url)))
        };
        assert!(with("postgresql://u@/db?host=/run/postgresql").fleet);
        assert!(!with("").fleet, "empty counts as unset");
    }

    #[test]
    fn the_writer_closes_idle_runs_after_the_idle_time_the_exporter_uses() {
        // Both read HERMES_METER_IDLE_TIMEOUT_SECONDS; the writer used to keep
        // 900 s whatever it said, closing a run the exporter still waited on.
        for (value, want, warnings) in [
            ("3600", 3600.0, 0),
            ("later", crate::config::DEFAULT_IDLE_TIMEOUT_SECONDS, 1),
        ] {
            let var = |k: &str| (k == "HERMES_METER_IDLE_TIMEOUT_SECONDS").then(|| value.to_string());
            let bridge = BridgeConfig::from_vars(|k| var(k).map(OsString::from));
            let export = ExportConfig::resolve(Default::default(), var);
            assert_eq!(bridge.idle_run_seconds, want, "{value}");
            assert_eq!(export.idle_timeout_seconds.value, want, "{value}");
            assert_eq!(
                bridge.export.idle_timeout_seconds.value, want,
                "the export thread gets the same: {value}"
            );
            assert_eq!(bridge.warnings.len(), warnings, "{value}");
        }
    }
}
