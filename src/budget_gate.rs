//! The budget gate: budget verdicts for the gating hooks, on the bridge's
//! writer thread.
//!
//! Owns: reloading `budgets.toml` when it changes (one `stat` at most every
//! [`RELOAD_INTERVAL`], never a restart), reading the spend snapshot of the
//! session's budgets from the store, and turning [`crate::budget::assess`]
//! into what Hermes sees:
//!
//! - `pre_llm_call`: `{"context": ...}` with the soft and hard notices (once
//!   per scope id, window and period, across processes) and pending alerts
//!   (free→paid, model unavailable; each shown once);
//! - `pre_tool_call` (enforce): `{"action": "block", ...}` while any budget
//!   of the session is in hard breach;
//! - `pre_api_request` (enforce): no return value (Hermes ignores it), but
//!   the call's id is left in [`BudgetHandle::take_stop`] for the
//!   `llm_execution` middleware, which answers with a stand-in response
//!   instead of calling the provider;
//! - any of them (enforce): a hard breach of a cron job's budget leaves one
//!   [`CronPause`] per window in [`BudgetHandle::take_pauses`] for the binding
//!   to call `cron.jobs.pause_job`.
//!
//! Must not touch: Python, the network. Every read is bounded (see
//! `store/budget.rs`), so a verdict costs the same whatever the store's size.

use crate::lock;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::bridge::{BudgetMode, Gate, GateNeeds, QueuedSpend, QuickGate, Verdict};
use crate::budget::{self, alert, verdict, BudgetConfig, BudgetState, Level, Scope, Window};
use crate::hook::{Hook, HookEvent};
use crate::store::Store;

/// How often the gate looks at the budget file's modification time.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Most stop decisions kept for the middleware; the oldest go first (a
/// stop is taken within milliseconds of being made, or never).
const MAX_STOPS: usize = 1024;

/// Most pending alerts shown in one `pre_llm_call`.
const MAX_ALERTS_PER_TURN: usize = 5;

/// A cron job the binding should pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronPause {
    pub job_id: String,
    pub reason: String,
    /// 1 for the first try; see [`BudgetHandle::pause_failed`].
    pub attempt: u32,
}

/// How long after a pause Hermes refused it is offered again.
pub const PAUSE_RETRY: Duration = Duration::from_secs(30);

/// Tries of one pause before it is given up (and said so).
pub const MAX_PAUSE_ATTEMPTS: u32 = 10;

/// How much more spend, anywhere, leaves the verdicts of one session (and
/// model) at "nothing to say", as measured at its last verdict.
#[derive(Debug, Clone, Copy)]
struct Headroom {
    /// Before `pre_llm_call` has a notice to give: the nearest soft line.
    notice_usd: f64,
    /// Before `pre_tool_call` or `pre_api_request` would be blocked: the
    /// nearest hard line.
    block_usd: f64,
    /// This process's applied spend bound when measured (`Gate::applied`).
    own_basis: f64,
    /// [`QuickView::cost`] when measured.
    cost_basis: f64,
}

/// What the hook threads read to skip a verdict ([`QuickGate`]). The rule:
/// a gating event goes ahead without waiting only while everything that
/// can have been spent since its session's last verdict (this process's
/// queued and applied calls, every process's recorded calls as of the last
/// refresh, every open reservation) stays under that verdict's headroom.
/// Each part is an upper bound, so the quick answer is the writer's answer;
/// only other processes' calls since the last refresh (at most
/// [`crate::bridge::GATE_REFRESH`] old) are not seen yet.
#[derive(Debug, Default)]
struct QuickView {
    /// The cost of every LLM call recorded, any process, at the last refresh.
    cost: f64,
    /// Every open reservation, any process.
    reserved: f64,
    /// An alert waits to be shown: `pre_llm_call` must wait for it.
    alerts_pending: bool,
    /// Keyed by [`quick_key`].
    sessions: HashMap<String, Headroom>,
    /// The least headroom of every budget any session can count toward
    /// (a fresh sender or cron job under a default limit included): for
    /// sessions not measured yet.
    universal: Option<Headroom>,
}

/// How often the universal headroom is measured again. It reads every
/// budget's spend (every sender's, with a per-sender default), so not at
/// every refresh; between two measures it only shrinks as spend grows.
const UNIVERSAL_REFRESH: Duration = Duration::from_secs(5);

/// Spend a quick verdict keeps in reserve besides its bounds (rounding).
const QUICK_MARGIN_USD: f64 = 1e-9;

/// Most sessions kept in the quick view; past this it starts over (a
/// session's next verdict measures it again).
const MAX_QUICK_SESSIONS: usize = 4096;

fn quick_key(session: &str, model: Option<&str>) -> String {
    format!("{session}\x1f{}", model.unwrap_or(""))
}

struct Shared {
    /// Which gating hooks wait for a verdict (see `Gate::needs`):
    /// `pre_tool_call` and `pre_api_request` while budgets are set in
    /// enforce mode, `pre_llm_call` while any budget is set or an alert is
    /// waiting to be shown.
    needs: Arc<GateNeeds>,
    stops: Mutex<(HashMap<String, String>, VecDeque<String>)>,
    pauses: Mutex<Vec<CronPause>>,
    /// Pauses Hermes refused, with when to offer them again.
    retries: Mutex<Vec<(Instant, CronPause)>>,
    messages: Mutex<Vec<String>>,
    quick: Mutex<QuickView>,
}

impl QuickGate for Shared {
    fn no_verdict(&self, event: &HookEvent, queued: QueuedSpend) -> bool {
        let (session, model, block) = match &event.hook {
            Hook::PreLlmCall(e) => (&e.session_id, e.model.as_deref(), false),
            Hook::PreToolCall(e) => (&e.tool.session_id, None, true),
            Hook::PreApiRequest(e) => (&e.api.session_id, e.api.model.as_deref(), true),
            _ => return false,
        };
        if queued.unknown > 0 {
            return false;
        }
        let view = lock(&self.quick);
        if !block && view.alerts_pending {
            return false;
        }
        let Some(h) = view
            .sessions
            .get(&quick_key(session, model))
            .or(view.universal.as_ref())
        else {
            return false;
        };
        let grown = (queued.usd - h.own_basis).max(0.0) + (view.cost - h.cost_basis).max(0.0) + view.reserved;
        // The sums are kept in different orders: a margin far above their
        // rounding, far below a cent.
        grown + QUICK_MARGIN_USD < if block { h.block_usd } else { h.notice_usd }
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            // Until the first refresh has looked for pending alerts,
            // `pre_llm_call` waits.
            needs: GateNeeds::new(true, false, false),
            stops: Mutex::default(),
            pauses: Mutex::default(),
            retries: Mutex::default(),
            messages: Mutex::default(),
            quick: Mutex::default(),
        }
    }
}

/// What the binding asks the gate for outside the hook return values.
/// Cheap to clone; every method is a short lock, no store access.
#[derive(Clone, Default)]
pub struct BudgetHandle(Arc<Shared>);

impl std::fmt::Debug for BudgetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BudgetHandle")
    }
}

impl BudgetHandle {
    /// The stand-in text if the LLM call `api_request_id` must be stopped
    /// (decided at its `pre_api_request`); taken once.
    pub fn take_stop(&self, api_request_id: &str) -> Option<String> {
        let mut stops = lock(&self.0.stops);
        let text = stops.0.remove(api_request_id)?;
        stops.1.retain(|id| id != api_request_id);
        Some(text)
    }

    /// Cron jobs to pause now: new pauses, and refused ones due again.
    pub fn take_pauses(&self) -> Vec<CronPause> {
        self.take_pauses_at(Instant::now())
    }

    /// [`BudgetHandle::take_pauses`] as of `now`.
    pub fn take_pauses_at(&self, now: Instant) -> Vec<CronPause> {
        let mut out = std::mem::take(&mut *lock(&self.0.pauses));
        let mut retries = lock(&self.0.retries);
        if !retries.is_empty() {
            let (due, later): (Vec<_>, Vec<_>) = retries.drain(..).partition(|(at, _)| *at <= now);
            *retries = later;
            out.extend(due.into_iter().map(|(_, pause)| pause));
        }
        out
    }

    /// Hermes did not pause `pause`'s job (its jobs file was busy, say):
    /// it is offered again [`PAUSE_RETRY`] from `now`, up to
    /// [`MAX_PAUSE_ATTEMPTS`] tries in all. Returns whether it will be.
    pub fn pause_failed(&self, pause: CronPause, now: Instant) -> bool {
        if pause.attempt >= MAX_PAUSE_ATTEMPTS {
            return false;
        }
        let retry = CronPause {
            attempt: pause.attempt + 1,
            ..pause
        };
        lock(&self.0.retries).push((now + PAUSE_RETRY, retry));
        true
    }

    /// Whether limits are loaded and enforced: tool and LLM calls wait for
    /// verdicts (a budget file just written takes up to [`RELOAD_INTERVAL`]).
    pub fn enforcing(&self) -> bool {
        self.0.needs.pre_api_request.load(Ordering::Acquire)
    }

    /// Problems to log (a budget file that does not parse).
    pub fn take_messages(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.0.messages))
    }

    fn stop(&self, api_request_id: &str, text: String) {
        let mut stops = lock(&self.0.stops);
        if stops.0.insert(api_request_id.to_string(), text).is_none() {
            stops.1.push_back(api_request_id.to_string());
        }
        while stops.1.len() > MAX_STOPS {
            if let Some(old) = stops.1.pop_front() {
                stops.0.remove(&old);
            }
        }
    }
}

/// The [`Gate`] that enforces `budgets.toml`.
pub struct BudgetGate {
    path: PathBuf,
    /// `HERMES_OTEL_BUDGET_MODE`, which wins over the file's `mode`.
    env_mode: Option<BudgetMode>,
    cfg: BudgetConfig,
    /// The file's (mtime, len) when loaded; `None` when it did not exist.
    loaded: Option<(SystemTime, u64)>,
    next_check: Instant,
    /// The configured zone once its per-period totals are kept in the store
    /// (see `Store::ensure_budget_zone`); until then spends are summed from
    /// the buckets, which is exact too, only slower.
    zone: Option<String>,
    /// When to try registering the zone again after a failure.
    next_zone_try: Instant,
    handle: BudgetHandle,
    /// This process's applied spend bound (see `Gate::applied`).
    applied_usd: f64,
    /// When the quick view's universal headroom is measured next.
    next_universal: Instant,
    /// The clock, replaceable in tests.
    clock: fn() -> f64,
    /// Budgets are the fleet's (`HERMES_OTEL_FLEET_URL` is set).
    fleet: bool,
    /// The store's fleet view version the quick view was measured against.
    fleet_version: i64,
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
            next_universal: Instant::now(),
            clock: crate::bridge::unix_now,
            fleet: false,
            fleet_version: 0,
        };
        gate.reload_if_changed(true);
        gate
    }

    /// Counts the fleet's spend (see [`crate::fleet`]) when `fleet`.
    pub fn with_fleet(mut self, fleet: bool) -> Self {
        self.fleet = fleet;
        self.reload_if_changed(true);
        self
    }

    /// The gate for a bridge: the file in its store directory, and the mode
    /// from `HERMES_OTEL_BUDGET_MODE` when that is set.
    pub fn for_store_dir(store_dir: &std::path::Path) -> Self {
        let env_mode = std::env::var(crate::bridge::env::BUDGET_MODE)
            .ok()
            .and_then(|v| BudgetMode::parse(&v));
        Self::new(store_dir.join(budget::BUDGETS_FILE_NAME), env_mode).with_fleet(fleet_from_env())
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
        match BudgetConfig::load(&self.path) {
            Ok(cfg) => {
                self.cfg = cfg;
                self.cfg.fleet = self.fleet;
            }
            Err(e) => lock(&self.handle.0.messages).push(format!("budget file ignored, previous limits kept: {e}")),
        }
        self.zone = None;
        self.next_zone_try = now;
        // Headrooms were measured against the old limits.
        let mut view = lock(&self.handle.0.quick);
        view.sessions.clear();
        view.universal = None;
        drop(view);
        self.next_universal = now;
        let armed = self.mode() == BudgetMode::Enforce && !self.cfg.is_empty();
        let needs = &self.handle.0.needs;
        needs.pre_tool_call.store(armed, Ordering::Release);
        needs.pre_api_request.store(armed, Ordering::Release);
        if !self.cfg.is_empty() {
            needs.pre_llm_call.store(true, Ordering::Release);
        }
    }

    /// Registers the configured zone's per-period totals once per load.
    fn ensure_zone(&mut self, store: &Store, now: f64) {
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

    /// The state of every budget of `session` (calling `model`) now.
    fn states(
        &self,
        store: &Store,
        session: &str,
        model: Option<&str>,
        now: f64,
        exclude: Option<&str>,
    ) -> crate::Result<Vec<BudgetState>> {
        store.read_snapshot(|st| self.states_in(st, session, model, now, exclude))
    }

    /// [`BudgetGate::states`] inside a snapshot the caller holds.
    fn states_in(
        &self,
        store: &Store,
        session: &str,
        model: Option<&str>,
        now: f64,
        exclude: Option<&str>,
    ) -> crate::Result<Vec<BudgetState>> {
        let keys = store.budget_scope_keys(session, model)?;
        match &self.zone {
            Some(zone) => store.budget_states_in_zone(&self.cfg, &keys, now, exclude, zone),
            None => store.budget_states_for(&self.cfg, &keys, now, exclude),
        }
    }

    fn decide(&mut self, store: &Store, event: &HookEvent) -> crate::Result<Option<Verdict>> {
        self.reload_if_changed(false);
        let now = (self.clock)();
        self.ensure_zone(store, now);
        let enforce = self.mode() == BudgetMode::Enforce;
        match &event.hook {
            Hook::PreLlmCall(e) => {
                let mut texts = Vec::new();
                // One snapshot for the budgets and the pending alerts.
                let (states, pending) = store.read_snapshot(|st| {
                    let states = if self.cfg.is_empty() {
                        Vec::new()
                    } else {
                        self.states_in(st, &e.session_id, e.model.as_deref(), now, None)?
                    };
                    Ok((states, st.pending_alerts(MAX_ALERTS_PER_TURN)?))
                })?;
                self.record_headroom(&e.session_id, e.model.as_deref(), &states);
                if !self.cfg.is_empty() {
                    for s in states.iter().filter(|s| s.level >= Level::Soft) {
                        let (kind, v) = if s.level == Level::Hard {
                            (alert::BUDGET_HARD, verdict::HARD)
                        } else {
                            (alert::BUDGET_SOFT, verdict::SOFT)
                        };
                        let text = budget::notice_text(s, self.mode(), &self.cfg.tz);
                        let key = format!("{}|{}|{}|{}", s.budget.scope, s.budget.id, s.budget.window, s.period);
                        if store.raise_alert_delivered(kind, &key, &text, now, &e.session_id)? {
                            store.count_budget_verdict(v, s, now)?;
                            texts.push(text);
                        }
                    }
                    if enforce {
                        self.pause_cron(store, &states, now, &e.session_id)?;
                    }
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
                let states = self.states(store, session, None, now, None)?;
                self.record_headroom(session, None, &states);
                self.pause_cron(store, &states, now, session)?;
                match blocking(&states) {
                    Some(s) => {
                        store.count_budget_verdict(verdict::BLOCKED, s, now)?;
                        Ok(Some(Verdict::Block {
                            message: budget::block_text(s, &self.cfg.tz),
                        }))
                    }
                    None => Ok(None),
                }
            }
            Hook::PreApiRequest(e) if enforce && !self.cfg.is_empty() => {
                let a = &e.api;
                // The call's own reservation is not held against it: a call
                // starts while the spend before it is under the limit.
                let states = self.states(store, &a.session_id, a.model.as_deref(), now, Some(&a.api_request_id))?;
                self.record_headroom(&a.session_id, a.model.as_deref(), &states);
                self.pause_cron(store, &states, now, &a.session_id)?;
                if let Some(s) = blocking(&states) {
                    store.count_budget_verdict(verdict::BLOCKED, s, now)?;
                    self.handle.stop(&a.api_request_id, budget::block_text(s, &self.cfg.tz));
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// Keeps, for the quick verdicts, how far `states` (of `session` calling
    /// `model`, just read) are from their soft and hard lines.
    fn record_headroom(&self, session: &str, model: Option<&str>, states: &[BudgetState]) {
        let (notice, block) = self.headroom_of(states);
        let mut view = lock(&self.handle.0.quick);
        if view.sessions.len() >= MAX_QUICK_SESSIONS {
            view.sessions.clear();
        }
        let h = Headroom {
            notice_usd: notice,
            block_usd: block,
            own_basis: self.applied_usd,
            cost_basis: view.cost,
        };
        view.sessions.insert(quick_key(session, model), h);
    }

    /// How far `states` are from their nearest soft line (notices) and hard
    /// line (blocks, pauses); zero once one is reached.
    fn headroom_of(&self, states: &[BudgetState]) -> (f64, f64) {
        let (mut notice, mut block) = (f64::INFINITY, f64::INFINITY);
        for s in states {
            let total = s.spend.total();
            let soft = s.budget.limit * self.cfg.soft_threshold;
            let hard = s.budget.limit * self.cfg.hard_threshold;
            notice = notice.min(if s.level >= Level::Soft {
                0.0
            } else {
                soft.min(hard) - total
            });
            block = block.min(if s.blocks() { 0.0 } else { hard - total });
            if let Some(f) = s.fleet {
                block = block.min(f.lease_left_usd.max(0.0));
            }
        }
        (notice, block)
    }

    /// Brings the quick view's store-wide figures up to date: the cost of
    /// every call recorded and every open reservation; at most every
    /// [`UNIVERSAL_REFRESH`], the universal headroom.
    fn refresh_quick(&mut self, store: &Store) -> crate::Result<()> {
        let (cost, reserved) = store.read_snapshot(|st| Ok((st.spend_total()?, st.reserved_now()?)))?;
        // A pull brought other hosts' spend: every headroom measured before
        // it is void.
        let fleet_version = if self.fleet { store.fleet_view_version()? } else { 0 };
        {
            let mut view = lock(&self.handle.0.quick);
            view.cost = cost;
            view.reserved = reserved;
            if fleet_version != self.fleet_version {
                view.sessions.clear();
                view.universal = None;
                self.next_universal = Instant::now();
            }
        }
        self.fleet_version = fleet_version;
        if Instant::now() >= self.next_universal {
            self.next_universal = Instant::now() + UNIVERSAL_REFRESH;
            // Every budget with spend, and a fresh id under each default.
            let (mut notice, mut block) = self.headroom_of(&store.budget_states(&self.cfg, (self.clock)())?);
            // A fresh id's lease is its hard line shared by the live hosts.
            let hosts = match self.fleet {
                true => store.fleet_status()?.map_or(1, |s| s.hosts.max(1)),
                false => 1,
            };
            for limits in self.cfg.scopes.values() {
                for w in Window::ALL {
                    if let Some(limit) = limits.default.get(w) {
                        notice = notice.min(limit * self.cfg.soft_threshold.min(self.cfg.hard_threshold));
                        block = block.min(limit * self.cfg.hard_threshold / hosts as f64);
                    }
                }
            }
            lock(&self.handle.0.quick).universal = Some(Headroom {
                notice_usd: notice,
                block_usd: block,
                own_basis: self.applied_usd,
                cost_basis: cost,
            });
        }
        Ok(())
    }

    /// A cron job's budget in hard breach pauses the job, once per window.
    fn pause_cron(&self, store: &Store, states: &[BudgetState], now: f64, session: &str) -> crate::Result<()> {
        for s in states
            .iter()
            .filter(|s| s.level == Level::Hard && s.budget.scope == Scope::CronJob)
        {
            if store.budget_claim_once("pause", s, now, session)? {
                store.count_budget_verdict(verdict::PAUSED, s, now)?;
                lock(&self.handle.0.pauses).push(CronPause {
                    job_id: s.budget.id.clone(),
                    reason: budget::pause_reason(s),
                    attempt: 1,
                });
            }
        }
        Ok(())
    }
}

impl Gate for BudgetGate {
    fn needs(&self) -> Arc<GateNeeds> {
        Arc::clone(&self.handle.0.needs)
    }

    fn refresh(&mut self, store: &Store) {
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
        let wait = !self.cfg.is_empty() || alerts_pending;
        self.handle.0.needs.pre_llm_call.store(wait, Ordering::Release);
    }

    fn quick(&self) -> Option<Arc<dyn QuickGate>> {
        Some(Arc::clone(&self.handle.0) as Arc<dyn QuickGate>)
    }

    fn applied(&mut self, spend_usd: f64) {
        self.applied_usd = spend_usd;
    }

    fn verdict(&mut self, store: &Store, event: &HookEvent) -> Option<Verdict> {
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

/// Whether `HERMES_OTEL_FLEET_URL` is set: budgets count the fleet's spend.
pub fn fleet_from_env() -> bool {
    std::env::var_os(crate::fleet::FLEET_URL_ENV).is_some_and(|v| !v.is_empty())
}

/// The state to block a call on: a hard breach first (its text says the
/// budget is exhausted), else a fleet lease used up.
fn blocking(states: &[BudgetState]) -> Option<&BudgetState> {
    states
        .iter()
        .find(|s| s.level == Level::Hard)
        .or_else(|| states.iter().find(|s| s.blocks()))
}

/// The budget gauges now (`hermes.budget.spend` and `hermes.budget.limit`,
/// one pair per budget; see [`budget::BudgetGauge`]): loads the budget file
/// of `store_dir` and reads every budget's spend (global, overrides, and each
/// id that spent under a default). For the metrics exporter, off the hook
/// path; each gauge maps onto `metrics::BudgetReading` field for field.
pub fn budget_gauges(store: &Store, store_dir: &std::path::Path, now: f64) -> crate::Result<Vec<budget::BudgetGauge>> {
    let mut cfg = BudgetConfig::load(&store_dir.join(budget::BUDGETS_FILE_NAME))?;
    cfg.fleet = fleet_from_env();
    if cfg.is_empty() {
        return Ok(Vec::new());
    }
    Ok(budget::gauges(&store.budget_states(&cfg, now)?))
}
