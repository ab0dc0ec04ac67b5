//! The budget gate: budget verdicts for the gating hooks, on the bridge's
//! writer thread.
//!
//! Owns: reloading `budgets.toml` when it changes (one `stat` at most every
//! [`RELOAD_INTERVAL`], never a restart), reading the spend snapshot of the
//! session's budgets from the store, and turning [`hermes_meter_model::budget::assess`]
//! into what Hermes sees:
//!
//! - `pre_llm_call`: `{"context": ...}` with the alert-threshold, soft and
//!   hard notices (once per scope id, window, period and threshold, across
//!   processes) and pending alerts
//!   (free→paid, model unavailable; each shown once);
//! - `pre_tool_call` (enforce): `{"action": "block", ...}` while any budget
//!   of the session is in hard breach;
//! - `pre_api_request` (enforce): no return value (Hermes ignores it), but
//!   the call's id is left in [`BudgetHandle::stop_for`] for the
//!   `llm_execution` middleware, which answers with a stand-in response
//!   instead of calling the provider;
//! - any of them (enforce): a hard breach of a cron job's budget leaves one
//!   [`CronPause`] per window in [`BudgetHandle::take_pauses`] for the binding
//!   to call `cron.jobs.pause_job`.
//!
//! Must not touch: Python, the network. Every read is bounded (see
//! `crates/hermes-meter-store/src/budget/spend.rs`), so a verdict costs the same whatever the
//! store's size.
//!
//! This file holds the gate itself; `handle.rs` what the binding asks it
//! (stops, waits, pauses, messages), `quick.rs` the headroom that lets a
//! hook thread skip a verdict, `caps.rs` the caps' use and notices,
//! `rates.rs` the rate limits.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::handle::{BudgetHandle, CronPause};
use super::quick::Unseen;
use super::watch::RunawayWatch;
use crate::bridge::{Gate, GateNeeds, QuickGate, Verdict};
use crate::lock;
use hermes_meter_model::budget::{
    self, alert, verdict, BudgetConfig, BudgetMode, BudgetState, CapState, Level, RunawayAction, Scope, Unsynced,
};
use hermes_meter_model::hook::{Hook, HookEvent};
use hermes_meter_store::{LogPlace, Reader, Writer};

/// How often the gate looks at the budget file's modification time.
pub(crate) const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// How messages name a fleet whose address is not known.
const UNNAMED_FLEET: &str = "(its address did not parse)";

/// Most pending alerts shown in one `pre_llm_call`.
const MAX_ALERTS_PER_TURN: usize = 5;

/// The [`Gate`] that enforces `budgets.toml`.
pub struct BudgetGate {
    pub(super) path: PathBuf,
    /// `HERMES_METER_BUDGET_MODE`, which wins over the file's `mode`.
    pub(super) env_mode: Option<BudgetMode>,
    pub(super) cfg: BudgetConfig,
    /// The file's (mtime, len) when loaded; `None` when it did not exist.
    pub(super) loaded: Option<(SystemTime, u64)>,
    pub(super) next_check: Instant,
    /// The configured zone once its per-period totals are kept in the store
    /// (see `Writer::ensure_budget_zone`); until then spends are summed from
    /// the buckets, which is exact too, only slower.
    pub(super) zone: Option<String>,
    /// When to try registering the zone again after a failure.
    pub(super) next_zone_try: Instant,
    pub(super) handle: BudgetHandle,
    /// This process's applied spend bound (see `Gate::applied`).
    pub(super) applied_usd: f64,
    /// This process's applied `pre_tool_call` events (see `Gate::applied`).
    pub(super) applied_tool_calls: u64,
    /// This process's `pre_api_request` events the gate has seen (counted
    /// in the rate buckets, see `rates.rs`).
    pub(super) observed_requests: u64,
    /// When the quick view's universal headroom is measured next.
    pub(super) next_universal: Instant,
    /// The clock, replaceable in tests.
    pub(super) clock: fn() -> f64,
    /// Budgets are the fleet's (`HERMES_METER_FLEET_URL` is set).
    pub(super) fleet: bool,
    /// The store's fleet view version the quick view was measured against.
    pub(super) fleet_version: i64,
    /// With a fleet: the store has not synced yet, as last seen (see
    /// `first_sync.rs`); it never goes back once synced.
    pub(super) awaiting_sync: bool,
    /// What an unsynced fleet host does once the first wait is over.
    pub(super) unsynced: Unsynced,
    /// The fleet database's address without its password, for messages.
    pub(super) fleet_name: String,
    /// The last failed sync attempt of an unsynced store.
    pub(super) sync_error: Option<String>,
    /// The fail-closed message was queued for the log (once a process).
    pub(super) unsynced_said: bool,
    /// The runaway watch (see `watch.rs`).
    pub(super) runaway: RunawayWatch,
    /// Why the budget file does not parse, while no limits were loaded
    /// before it (a typo in the file Hermes starts with): in enforce mode
    /// every tool and LLM call is then held until it is fixed, since the
    /// limits the operator wrote cannot be checked.
    pub(super) invalid: Option<String>,
}

impl std::fmt::Debug for BudgetGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetGate").field("path", &self.path).finish()
    }
}

impl BudgetGate {
    /// A gate for the budget file `path`; `env_mode` overrides its `mode`.
    pub fn new(path: PathBuf, env_mode: Option<BudgetMode>) -> Self {
        let mut gate = BudgetGate {
            path,
            env_mode,
            cfg: BudgetConfig::default(),
            loaded: None,
            next_check: Instant::now(),
            zone: None,
            next_zone_try: Instant::now(),
            handle: BudgetHandle::default(),
            applied_usd: 0.0,
            applied_tool_calls: 0,
            observed_requests: 0,
            next_universal: Instant::now(),
            clock: hermes_meter_store::unix_now,
            fleet: false,
            fleet_version: 0,
            awaiting_sync: false,
            unsynced: Unsynced::default(),
            fleet_name: UNNAMED_FLEET.into(),
            sync_error: None,
            unsynced_said: false,
            runaway: RunawayWatch::default(),
            invalid: None,
        };
        gate.reload_if_changed(true);
        gate
    }

    /// Counts the fleet's spend (see [`crate::fleet`]) when `fleet`.
    /// Until the writer has looked, a fleet host's store counts as never
    /// synced: gated calls wait for that look (or the first sync).
    pub fn with_fleet(mut self, fleet: bool) -> Self {
        self.fleet = fleet;
        self.awaiting_sync = fleet;
        if fleet {
            self.handle.0.first_sync.reset();
        } else {
            self.handle.0.first_sync.set_ready();
        }
        self.reload_if_changed(true);
        self
    }

    /// The gate for a bridge: the file in its store directory, the mode
    /// override (`HERMES_METER_BUDGET_MODE`, resolved by `crate::config`)
    /// and whether a fleet's spend counts.
    pub fn for_store_dir(store_dir: &std::path::Path, mode: Option<BudgetMode>, fleet: bool) -> Self {
        Self::new(store_dir.join(budget::BUDGETS_FILE_NAME), mode).with_fleet(fleet)
    }

    /// What a fleet host whose store never synced does once
    /// [`FIRST_SYNC_WAIT`](hermes_meter_model::budget::FIRST_SYNC_WAIT) passed
    /// (`HERMES_METER_FLEET_UNSYNCED`, resolved by `crate::config`), and the
    /// fleet's address (without its password) its block message names.
    /// `None` for a URL that does not parse: the message names no address.
    pub fn with_unsynced(mut self, unsynced: Unsynced, fleet_name: Option<String>) -> Self {
        self.unsynced = unsynced;
        if let Some(name) = fleet_name {
            self.fleet_name = name;
        }
        self
    }

    /// Uses `clock` (Unix seconds) instead of the system clock.
    pub fn with_clock(mut self, clock: fn() -> f64) -> Self {
        self.clock = clock;
        self
    }

    /// The handle the binding keeps.
    pub fn handle(&self) -> BudgetHandle {
        self.handle.clone()
    }

    /// The configuration in force.
    pub fn config(&self) -> &BudgetConfig {
        &self.cfg
    }

    /// The mode in force: the environment's, else the file's, else enforce.
    pub fn mode(&self) -> BudgetMode {
        self.env_mode.unwrap_or(self.cfg.mode)
    }

    /// Reloads the file if its modification time or size changed; at most
    /// once per [`RELOAD_INTERVAL`] unless `force`. A file that does not
    /// parse keeps the previous configuration and is reported once per change.
    pub fn reload_if_changed(&mut self, force: bool) {
        let now = Instant::now();
        if !force && now < self.next_check {
            return;
        }
        self.next_check = now + RELOAD_INTERVAL;
        let seen = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        if seen == self.loaded && !force {
            return;
        }
        self.loaded = seen;
        match crate::config::load_budgets(&self.path) {
            Ok(cfg) => {
                self.cfg = cfg;
                self.cfg.fleet = self.fleet;
                self.invalid = None;
                if !self.cfg.is_empty() {
                    let dir = self.path.parent().unwrap_or(std::path::Path::new("."));
                    for problem in super::world_writable(dir) {
                        lock(&self.handle.0.messages).push(format!("the limits are not safe: {problem}"));
                    }
                }
            }
            Err(e) if !self.cfg.is_empty() => {
                lock(&self.handle.0.messages).push(format!("budget file ignored, previous limits kept: {e}"));
            }
            Err(e) => {
                let held = match self.mode() {
                    BudgetMode::Enforce => "every tool and LLM call is held until it is fixed",
                    BudgetMode::Observe => "observe mode: nothing is held",
                };
                lock(&self.handle.0.messages).push(format!(
                    "budget file does not parse, NO limit is in force ({held}): {e}"
                ));
                self.invalid = Some(e.to_string());
            }
        }
        lock(&self.handle.0.quick).held = self.holds();
        self.zone = None;
        self.next_zone_try = now;
        // Headrooms were measured against the old limits.
        let mut view = lock(&self.handle.0.quick);
        view.sessions.clear();
        view.universal = None;
        drop(view);
        self.next_universal = now;
        self.arm();
        if !self.cfg.is_empty() || self.awaits_sync() {
            self.handle.0.needs.pre_llm_call.store(true, Ordering::Release);
        }
    }

    /// Sets whether `pre_tool_call` and `pre_api_request` wait for a
    /// verdict: in enforce mode, while a limit is set, the fleet's first
    /// sync is awaited, runaways are stopped (`[runaway] action = "stop"`),
    /// or a run is stopped as a runaway.
    pub(super) fn arm(&self) {
        // Any tool call or request may be the one a sign of a loop stops:
        // each waits until the watch saw it and everything before it.
        let stops_runaways = self.runaway_action() == RunawayAction::Stop;
        {
            let mut view = lock(&self.handle.0.quick);
            view.stops_runaways = stops_runaways;
            view.rate_limited = self.mode() == BudgetMode::Enforce && self.cfg.has_money_rate_limits();
        }
        let armed = self.mode() == BudgetMode::Enforce
            && (!self.cfg.is_empty()
                || self.holds()
                || self.awaits_sync()
                || stops_runaways
                || !self.runaway.stopped.is_empty());
        let needs = &self.handle.0.needs;
        needs.pre_tool_call.store(armed, Ordering::Release);
        needs.pre_api_request.store(armed, Ordering::Release);
    }

    /// Looks, while the store never synced with the fleet, whether it has
    /// now: then loads the budget file the sync wrote (at once, not at the
    /// next reload) and releases the hooks waiting for it.
    fn check_first_sync(&mut self, store: &Reader) {
        if !self.awaiting_sync {
            return;
        }
        match store.fleet_status() {
            Ok(Some(st)) if st.synced_at.is_some() => {
                self.awaiting_sync = false;
                self.sync_error = None;
                self.reload_if_changed(true);
                self.handle.0.first_sync.set_ready();
            }
            Ok(st) => self.sync_error = st.and_then(|s| s.error),
            // Still unsynced as far as the gate can tell; said when it blocks.
            Err(e) => self.sync_error = Some(format!("cannot read the fleet sync state: {e}")),
        }
    }

    /// Whether gated calls wait for a first fleet sync: an unsynced fleet
    /// host may have fleet budgets it does not know yet, which only
    /// enforce mode acts on.
    fn awaits_sync(&self) -> bool {
        self.awaiting_sync && self.mode() == BudgetMode::Enforce
    }

    /// Whether every call is held for a budget file that does not parse
    /// (enforce mode, no limits loaded before it).
    fn holds(&self) -> bool {
        self.invalid.is_some() && self.mode() == BudgetMode::Enforce
    }

    /// Whether calls are blocked for want of a first fleet sync.
    fn fails_closed(&self) -> bool {
        self.fleet && self.awaiting_sync && self.unsynced == Unsynced::Closed
    }

    /// The block text of an unsynced fleet host; logged once a process.
    fn unsynced_block(&mut self) -> String {
        let text = budget::unsynced_block_text(&self.fleet_name, self.sync_error.as_deref());
        if !self.unsynced_said {
            self.unsynced_said = true;
            lock(&self.handle.0.messages).push(format!(
                "fleet budgets fail closed: tool and LLM calls are blocked until this store first syncs with {}",
                self.fleet_name
            ));
        }
        text
    }

    /// Registers the configured zone's per-period totals once per load.
    fn ensure_zone(&mut self, store: &Writer, now: f64) {
        if self.zone.is_some() || self.cfg.is_empty() || Instant::now() < self.next_zone_try {
            return;
        }
        self.next_zone_try = Instant::now() + RELOAD_INTERVAL;
        let Some(name) = self.cfg.tz.iana_name().map(str::to_string) else {
            return;
        };
        match store.ensure_budget_zone(&name, now) {
            Ok(true) => self.zone = Some(name),
            Ok(false) => {}
            Err(e) => lock(&self.handle.0.messages).push(format!("budget zone {name} not registered yet: {e}")),
        }
    }

    /// The state of every budget of `session` (calling `model`) now,
    /// inside a snapshot the caller holds.
    fn states_in(
        &self,
        store: &Reader,
        session: &str,
        model: Option<&str>,
        now: f64,
        exclude: Option<&str>,
    ) -> hermes_meter_store::Result<Vec<BudgetState>> {
        let keys = store.budget_scope_keys(session, model)?;
        match &self.zone {
            Some(zone) => store.budget_states_in_zone(&self.cfg, &keys, now, exclude, zone),
            None => store.budget_states_for(&self.cfg, &keys, now, exclude),
        }
    }

    fn decide(&mut self, store: &Writer, event: &HookEvent) -> hermes_meter_store::Result<Option<Verdict>> {
        self.check_first_sync(store);
        self.reload_if_changed(false);
        let now = (self.clock)();
        self.ensure_zone(store, now);
        let enforce = self.mode() == BudgetMode::Enforce;
        let place = place_of(event);
        if let Hook::PreToolCall(e) = &event.hook {
            if let Some(what) = e.meter_change.as_deref().filter(|_| enforce) {
                // The brake is not the agent's to lift (the model crate's crates/hermes-meter-model/src/hook/protect.rs).
                lock(&self.handle.0.messages).push(format!(
                    "refused tool call {} ({}) of session {}: it would change {what}",
                    e.tool.tool_call_id, e.tool.tool_name, e.tool.session_id
                ));
                return Ok(Some(Verdict::Block {
                    message: budget::protected_text(what),
                }));
            }
        }
        if matches!(event.hook, Hook::PreToolCall(_) | Hook::PreApiRequest(_)) {
            if let Some(text) = self.held_for(enforce) {
                return self.hold(store, event, text, now, place);
            }
        }
        if enforce && !self.runaway.stopped.is_empty() {
            match &event.hook {
                Hook::PreToolCall(e) => {
                    if let Some(message) = self.stop_runaway(store, &e.tool.session_id, None, now, place)? {
                        return Ok(Some(Verdict::Block { message }));
                    }
                }
                Hook::PreApiRequest(e) => {
                    let a = &e.api;
                    if self
                        .stop_runaway(store, &a.session_id, Some(&a.api_request_id), now, place)?
                        .is_some()
                    {
                        return Ok(None);
                    }
                }
                _ => {}
            }
        }
        match &event.hook {
            Hook::PreLlmCall(e) => {
                let mut texts = Vec::new();
                // One snapshot for the budgets and the pending alerts.
                let (states, caps, pending) = store.read_snapshot(|st| {
                    let states = if self.cfg.is_empty() {
                        Vec::new()
                    } else {
                        self.states_in(st, &e.session_id, e.model.as_deref(), now, None)?
                    };
                    let (caps, _) = self.caps_in(st, &e.session_id, now, None, None)?;
                    Ok((states, caps, st.pending_alerts(MAX_ALERTS_PER_TURN)?))
                })?;
                self.record_headroom(
                    &e.session_id,
                    e.model.as_deref(),
                    &states,
                    &caps,
                    Unseen::default(),
                    None,
                );
                // Observe mode routes no call (and ends a downgrade an
                // earlier enforce mode began).
                let to = self.downgrade(&states, &caps).filter(|_| enforce);
                self.handle.note_downgrade(&e.session_id, to);
                if !self.cfg.is_empty() {
                    for (key, text) in states.iter().filter_map(|s| self.threshold_alert(s)) {
                        if store.raise_alert_delivered(alert::BUDGET_THRESHOLD, &key, &text, now, &e.session_id)? {
                            store.log_alert(alert::BUDGET_THRESHOLD, &text, now, place)?;
                            texts.push(text);
                        }
                    }
                    for s in states.iter().filter(|s| s.level >= Level::Soft) {
                        let (kind, v) = if s.level == Level::Hard {
                            (alert::BUDGET_HARD, verdict::HARD)
                        } else {
                            (alert::BUDGET_SOFT, verdict::SOFT)
                        };
                        let text = budget::notice_text(s, self.mode(), &self.cfg.tz);
                        let key = format!("{}|{}|{}|{}", s.budget.scope, s.budget.id, s.budget.key(), s.period);
                        if store.raise_alert_delivered(kind, &key, &text, now, &e.session_id)? {
                            store.count_budget_verdict(v, s, now, place, &text)?;
                            texts.push(text);
                        }
                    }
                    if enforce {
                        self.pause_cron(store, &states, now, &e.session_id, place)?;
                    }
                    self.cap_notices(store, &caps, now, place, &mut texts)?;
                }
                for (kind, key, text) in pending {
                    if store.deliver_alert(&kind, &key, now, &e.session_id)? {
                        texts.push(text);
                    }
                }
                Ok((!texts.is_empty()).then(|| Verdict::Context {
                    text: texts.join("\n\n"),
                }))
            }
            Hook::PreToolCall(e) if enforce && !self.cfg.is_empty() => {
                let session = &e.tool.session_id;
                let (states, (caps, unseen)) = store.read_snapshot(|st| {
                    let states = self.states_in(st, session, None, now, None)?;
                    Ok((states, self.caps_in(st, session, now, None, Some(event.at))?))
                })?;
                self.record_headroom(session, None, &states, &caps, unseen, None);
                self.handle.note_downgrade(session, self.downgrade(&states, &caps));
                self.pause_cron(store, &states, now, session, place)?;
                match self.block(store, &states, &caps, true, now, place)? {
                    Some((message, stops_llm)) => {
                        self.handle.note_session(session, stops_llm.then(|| message.clone()));
                        Ok(Some(Verdict::Block { message }))
                    }
                    None => {
                        self.handle.note_session(session, None);
                        Ok(None)
                    }
                }
            }
            Hook::PreApiRequest(e) if enforce && !self.cfg.is_empty() => {
                let a = &e.api;
                let Some(requests_left) = self.rate_verdict(store, e, now, place)? else {
                    return Ok(None);
                };
                // The call's own reservation is not held against it: a call
                // starts while the spend before it is under the limit.
                let exclude = Some(a.api_request_id.as_str());
                let (states, caps, own) = store.read_snapshot(|st| {
                    let states = self.states_in(st, &a.session_id, a.model.as_deref(), now, exclude)?;
                    let (caps, _) = self.caps_in(st, &a.session_id, now, exclude, None)?;
                    Ok((states, caps, st.reservation_usd(&a.api_request_id)?))
                })?;
                let unseen = Unseen {
                    usd: own,
                    tool_calls: 0.0,
                };
                self.record_headroom(
                    &a.session_id,
                    a.model.as_deref(),
                    &states,
                    &caps,
                    unseen,
                    Some(requests_left),
                );
                self.handle
                    .note_downgrade(&a.session_id, self.downgrade(&states, &caps));
                self.pause_cron(store, &states, now, &a.session_id, place)?;
                match self.block(store, &states, &caps, false, now, place)? {
                    Some((text, _)) => self.stop_call(store, &a.session_id, &a.api_request_id, text, now)?,
                    None => self.handle.note_session(&a.session_id, None),
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// The alert of the highest alert threshold `s` reached, if any: its
    /// key (one per budget, period and threshold) and text.
    fn threshold_alert(&self, s: &BudgetState) -> Option<(String, String)> {
        let t = budget::threshold_reached(&self.cfg, s)?;
        let key = format!("{}|{}|{}|{}|{t}", s.budget.scope, s.budget.id, s.budget.key(), s.period);
        Some((key, budget::threshold_text(s, t, &self.cfg.tz)))
    }

    /// Stops the LLM call `id` of `session` with `text`: the session's
    /// auxiliary calls stop with it, the call's span is sent at once and
    /// its reservation released (it spends nothing; no hook ends it).
    pub(super) fn stop_call(
        &self,
        store: &Writer,
        session: &str,
        id: &str,
        text: String,
        now: f64,
    ) -> hermes_meter_store::Result<()> {
        self.handle.note_session(session, Some(text.clone()));
        self.handle.stop(id, text);
        store.enqueue_stopped_call(session, id, now)
    }

    /// Why every tool and LLM call is held now, whatever the spend: a
    /// budget file that never parsed (its limits cannot be checked), or in
    /// enforce mode a fleet host that never synced (fail closed).
    fn held_for(&mut self, enforce: bool) -> Option<String> {
        if self.holds() {
            Some(budget::invalid_file_text())
        } else if enforce && self.fails_closed() {
            Some(self.unsynced_block())
        } else {
            None
        }
    }

    /// Holds a tool call or an LLM call with `text`, counted and its
    /// session marked like any stop ("global": every limit is unknown).
    fn hold(
        &self,
        store: &Writer,
        event: &HookEvent,
        text: String,
        now: f64,
        place: LogPlace<'_>,
    ) -> hermes_meter_store::Result<Option<Verdict>> {
        store.count_verdict(verdict::BLOCKED, "global", budget::LIFETIME, now, place, &text)?;
        match &event.hook {
            Hook::PreToolCall(e) => {
                self.handle.note_session(&e.tool.session_id, Some(text.clone()));
                Ok(Some(Verdict::Block { message: text }))
            }
            Hook::PreApiRequest(e) => {
                self.stop_call(store, &e.api.session_id, &e.api.api_request_id, text, now)?;
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// The stop text when `session`'s run is stopped as a runaway: its
    /// call is then counted as blocked and, for an LLM call (`request`),
    /// stopped.
    fn stop_runaway(
        &self,
        store: &Writer,
        session: &str,
        request: Option<&str>,
        now: f64,
        place: LogPlace<'_>,
    ) -> hermes_meter_store::Result<Option<String>> {
        let Some(text) = self.runaway_stop(store, session)? else {
            return Ok(None);
        };
        store.count_verdict(verdict::BLOCKED, "run", budget::LIFETIME, now, place, &text)?;
        match request {
            Some(id) => self.stop_call(store, session, id, text.clone(), now)?,
            None => self.handle.note_session(session, Some(text.clone())),
        }
        Ok(Some(text))
    }

    /// Where a session's next LLM calls go (`[downgrade]`): set while one
    /// of its budgets or caps in USD or tokens is at or past the downgrade
    /// line. Decided at each gating hook for the calls after it, since
    /// Hermes asks the `llm_request` middleware before the call's own
    /// `pre_api_request`.
    fn downgrade(&self, states: &[BudgetState], caps: &[CapState]) -> Option<Arc<budget::Downgrade>> {
        let d = self.cfg.downgrade.as_ref()?;
        let past = |used: f64, limit: f64| used >= d.at * limit;
        let any = states.iter().any(|s| past(s.spend.total(), s.budget.limit))
            || caps
                .iter()
                .any(|c| c.cap.unit != budget::CapUnit::ToolCalls && past(c.used, c.cap.limit));
        any.then(|| Arc::clone(d))
    }

    /// What blocks a tool call (`tool`) or an LLM call now, counted as a
    /// verdict: a budget in hard breach, else a cap in hard breach (a
    /// tool-call cap blocks tool calls only), else a fleet lease used up.
    /// The block text, and whether it stops LLM calls too.
    fn block(
        &self,
        store: &Writer,
        states: &[BudgetState],
        caps: &[CapState],
        tool: bool,
        now: f64,
        place: LogPlace<'_>,
    ) -> hermes_meter_store::Result<Option<(String, bool)>> {
        let hard_budget = states.iter().find(|s| s.level == Level::Hard);
        let hard_cap = caps
            .iter()
            .find(|c| c.level == Level::Hard && (tool || c.stops_llm_calls()));
        if let (None, Some(c)) = (hard_budget, hard_cap) {
            let text = budget::cap_block_text(c);
            store.count_verdict(
                verdict::BLOCKED,
                c.cap.scope.as_str(),
                budget::LIFETIME,
                now,
                place,
                &text,
            )?;
            return Ok(Some((text, c.stops_llm_calls())));
        }
        Ok(match blocking(states) {
            Some(s) => {
                let text = budget::block_text(s, s.budget.limit * self.cfg.hard_threshold, &self.cfg.tz);
                store.count_budget_verdict(verdict::BLOCKED, s, now, place, &text)?;
                Some((text, true))
            }
            None => None,
        })
    }

    /// After an LLM call's spend committed: the session's stop for its
    /// next auxiliary call (`BudgetHandle::session_stop`), from what is
    /// spent now. Auxiliary calls (a title after the turn, compression)
    /// fire no `pre_api_request` of their own, so without this they would
    /// be judged by the verdict of the turn's last call, taken before that
    /// call's spend. Reads only; counts and alerts belong to the verdicts.
    fn after_spend(&mut self, store: &Writer, event: &HookEvent) -> hermes_meter_store::Result<()> {
        let Hook::PostApiRequest(e) = &event.hook else {
            return Ok(());
        };
        if self.cfg.is_empty() {
            return Ok(());
        }
        let a = &e.api;
        let now = (self.clock)();
        let (states, caps) = store.read_snapshot(|st| {
            let states = self.states_in(st, &a.session_id, a.model.as_deref(), now, None)?;
            let (caps, _) = self.caps_in(st, &a.session_id, now, None, None)?;
            Ok((states, caps))
        })?;
        // An alert threshold this call crossed is raised now, pending: the
        // next `pre_llm_call` (this session's or any other's, in any
        // process) waits for it and shows it. Left to that verdict alone,
        // a threshold crossed by the last call of a process was never
        // raised: the quick view only waits for lines not yet passed.
        for (key, text) in states.iter().filter_map(|s| self.threshold_alert(s)) {
            if store.raise_pending_alert(alert::BUDGET_THRESHOLD, &key, &text, now)? {
                store.log_alert(alert::BUDGET_THRESHOLD, &text, now, place_of(event))?;
            }
        }
        if self.mode() != BudgetMode::Enforce {
            return Ok(());
        }
        let hard_budget = states.iter().find(|s| s.level == Level::Hard);
        let hard_cap = caps.iter().find(|c| c.level == Level::Hard && c.stops_llm_calls());
        let stop = match (hard_budget, hard_cap) {
            (None, Some(c)) => Some(budget::cap_block_text(c)),
            _ => {
                blocking(&states).map(|s| budget::block_text(s, s.budget.limit * self.cfg.hard_threshold, &self.cfg.tz))
            }
        };
        if stop.is_some() {
            self.handle.note_session(&a.session_id, stop);
        }
        Ok(())
    }

    /// A cron job's budget in hard breach pauses the job, once per window.
    fn pause_cron(
        &self,
        store: &Writer,
        states: &[BudgetState],
        now: f64,
        session: &str,
        place: LogPlace<'_>,
    ) -> hermes_meter_store::Result<()> {
        for s in states
            .iter()
            .filter(|s| s.level == Level::Hard && s.budget.scope == Scope::CronJob)
        {
            if store.budget_claim_once("pause", s, now, session)? {
                let reason = budget::pause_reason(s);
                store.count_budget_verdict(verdict::PAUSED, s, now, place, &reason)?;
                lock(&self.handle.0.pauses).push(CronPause {
                    job_id: s.budget.id.clone(),
                    reason,
                    attempt: 1,
                });
            }
        }
        Ok(())
    }
}

/// Where a gated hook's verdict happened: its session and turn, and for
/// a tool call its span.
fn place_of(event: &HookEvent) -> LogPlace<'_> {
    match &event.hook {
        Hook::PreLlmCall(e) => LogPlace {
            session_id: Some(&e.session_id),
            turn_id: Some(&e.turn_id),
            span_id: None,
        },
        Hook::PreToolCall(e) => LogPlace {
            session_id: Some(&e.tool.session_id),
            turn_id: e.tool.turn_id.as_deref(),
            span_id: Some(hermes_meter_model::span::tool_span_id(
                &e.tool.session_id,
                &e.tool.tool_call_id,
            )),
        },
        Hook::PreApiRequest(e) => LogPlace {
            session_id: Some(&e.api.session_id),
            turn_id: e.api.turn_id.as_deref(),
            span_id: None,
        },
        _ => LogPlace::default(),
    }
}

impl Gate for BudgetGate {
    fn needs(&self) -> Arc<GateNeeds> {
        Arc::clone(&self.handle.0.needs)
    }

    fn refresh(&mut self, store: &Reader) {
        self.check_first_sync(store);
        self.reload_if_changed(false);
        // `pre_llm_call` shows pending alerts, in this process's commits or
        // another's: it waits while one is pending, and while a budget is
        // set unless the quick view answers for it.
        let alerts_pending = store.has_pending_alerts().unwrap_or_else(|e| {
            lock(&self.handle.0.messages).push(format!("cannot look for pending alerts: {e}"));
            true
        });
        lock(&self.handle.0.quick).alerts_pending = alerts_pending;
        if !self.cfg.is_empty() {
            if let Err(e) = self.refresh_quick(store) {
                // Without fresh figures no quick verdict is safe.
                let mut view = lock(&self.handle.0.quick);
                view.sessions.clear();
                view.universal = None;
                drop(view);
                lock(&self.handle.0.messages).push(format!("budget quick view not refreshed: {e}"));
            }
        }
        let wait = !self.cfg.is_empty() || alerts_pending || self.awaits_sync();
        self.handle.0.needs.pre_llm_call.store(wait, Ordering::Release);
    }

    fn quick(&self) -> Option<Arc<dyn QuickGate>> {
        Some(Arc::clone(&self.handle.0) as Arc<dyn QuickGate>)
    }

    fn applied(&mut self, spend_usd: f64, tool_calls: u64) {
        self.applied_usd = spend_usd;
        self.applied_tool_calls = tool_calls;
    }

    fn observe(&mut self, store: &Writer, event: &HookEvent) {
        if let Err(e) = self.watch(store, event) {
            lock(&self.handle.0.messages).push(format!("runaway watch skipped an event: {e}"));
        }
        if let Err(e) = self.after_spend(store, event) {
            lock(&self.handle.0.messages).push(format!("budget state after a call not refreshed: {e}"));
        }
        if matches!(event.hook, Hook::PreApiRequest(_)) {
            self.observed_requests += 1;
        }
        if let Err(e) = self.rate_observe(store, event) {
            lock(&self.handle.0.messages).push(format!("rate limits did not count an event: {e}"));
        }
    }

    fn verdict(&mut self, store: &Writer, event: &HookEvent) -> Option<Verdict> {
        match self.decide(store, event) {
            Ok(v) => v,
            Err(e) => {
                // Fail open: a store error never blocks Hermes.
                lock(&self.handle.0.messages).push(format!("budget verdict failed, call allowed: {e}"));
                None
            }
        }
    }
}

/// The state to block a call on: a hard breach first (its text says the
/// budget is exhausted), else a fleet lease used up.
fn blocking(states: &[BudgetState]) -> Option<&BudgetState> {
    states
        .iter()
        .find(|s| s.level == Level::Hard)
        .or_else(|| states.iter().find(|s| s.blocks()))
}
