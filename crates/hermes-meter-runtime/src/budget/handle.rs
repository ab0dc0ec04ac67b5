//! What the binding asks the budget gate outside hook return values: LLM
//! calls to stop, cron jobs to pause (and retry), messages to log.
//!
//! Owns: [`BudgetHandle`], [`CronPause`] and the state the gate shares with
//! hook threads. Must not touch: the store; every method is a short lock.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::first_sync::FirstSync;
use super::quick::QuickView;
use crate::bridge::GateNeeds;
use crate::lock;
use hermes_meter_model::budget::Downgrade;

/// Most stop decisions kept for the middleware; the oldest go first (a
/// stop is taken within milliseconds of being made, or never).
const MAX_STOPS: usize = 1024;

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

/// Values by session, the keys in the order they were noted so the oldest
/// can be forgotten.
pub(super) type Recent<V> = Mutex<(HashMap<String, V>, VecDeque<String>)>;

/// The state the gate shares with its handle and the hook threads.
pub(super) struct Shared {
    /// Which gating hooks wait for a verdict (see `Gate::needs`):
    /// `pre_tool_call` and `pre_api_request` while budgets are set in
    /// enforce mode, `pre_llm_call` while any budget is set or an alert is
    /// waiting to be shown.
    pub(super) needs: Arc<GateNeeds>,
    pub(super) stops: Recent<String>,
    /// The stop text of each session whose last LLM or tool verdict was a
    /// hard breach: what an auxiliary call of that session (which has no
    /// `pre_api_request` of its own) is stopped with.
    pub(super) session_stops: Recent<String>,
    /// The model each session's next LLM calls are routed to, when its
    /// last verdict found a budget past the `[downgrade]` line.
    pub(super) downgrades: Recent<Arc<Downgrade>>,
    /// How long each LLM call a rate limit holds back waits before it goes
    /// (`[rate_limit] action = "wait"`), by `api_request_id`, in seconds.
    pub(super) waits: Recent<f64>,
    pub(super) pauses: Mutex<Vec<CronPause>>,
    /// Pauses Hermes refused, with when to offer them again.
    pub(super) retries: Mutex<Vec<(Instant, CronPause)>>,
    pub(super) messages: Mutex<Vec<String>>,
    pub(super) quick: Mutex<QuickView>,
    /// A fleet host's first sync, which gated calls wait for (see
    /// `first_sync.rs`); ready at once without a fleet.
    pub(super) first_sync: FirstSync,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            // Until the first refresh has looked for pending alerts,
            // `pre_llm_call` waits.
            needs: GateNeeds::new(true, false, false),
            stops: Mutex::default(),
            session_stops: Mutex::default(),
            downgrades: Mutex::default(),
            waits: Mutex::default(),
            pauses: Mutex::default(),
            retries: Mutex::default(),
            messages: Mutex::default(),
            quick: Mutex::default(),
            first_sync: FirstSync::new(true),
        }
    }
}

/// What the binding asks the gate for outside the hook return values.
/// Cheap to clone; every method is a short lock, no store access.
#[derive(Clone, Default)]
pub struct BudgetHandle(pub(super) Arc<Shared>);

impl std::fmt::Debug for BudgetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BudgetHandle")
    }
}

impl BudgetHandle {
    /// The stand-in text if the LLM call `api_request_id` must be stopped
    /// (decided at its `pre_api_request`). Every attempt of the request is
    /// stopped, not only the first: a Hermes that takes the stop for an API
    /// error retries the same id, and that retry must not reach the
    /// provider either. Stops leave only past [`MAX_STOPS`], oldest first.
    pub fn stop_for(&self, api_request_id: &str) -> Option<String> {
        lock(&self.0.stops).0.get(api_request_id).cloned()
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
    /// verdicts (a budget file just written takes up to [`super::RELOAD_INTERVAL`]).
    pub fn enforcing(&self) -> bool {
        self.0.needs.pre_api_request.load(Ordering::Acquire)
    }

    /// Problems to log (a budget file that does not parse).
    pub fn take_messages(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.0.messages))
    }

    pub(super) fn stop(&self, api_request_id: &str, text: String) {
        remember(&self.0.stops, api_request_id, text);
    }

    /// The stand-in text for an auxiliary LLM call of `session_id` (Hermes
    /// main's `aux-…` calls pass the `llm_execution` middleware but fire no
    /// `pre_api_request`): the session's last verdict, if it was a hard
    /// breach. A call of a session with no verdict yet goes ahead.
    pub fn session_stop(&self, session_id: &str) -> Option<String> {
        lock(&self.0.session_stops).0.get(session_id).cloned()
    }

    /// Notes the outcome of a verdict of `session_id`: `Some` stop text for
    /// a hard breach, `None` for a call that may go ahead.
    pub(super) fn note_session(&self, session_id: &str, stop: Option<String>) {
        note(&self.0.session_stops, session_id, stop);
    }

    /// The model the next LLM call of `session_id` to the agent's `model`
    /// goes to instead (`[downgrade]`), if the session's last verdict said
    /// so and the budget file names one for that model; Hermes's
    /// `llm_request` middleware asks before each call.
    pub fn downgrade_for(&self, session_id: &str, model: Option<&str>) -> Option<String> {
        let routes = lock(&self.0.downgrades).0.get(session_id).cloned()?;
        routes.target(model).map(str::to_string)
    }

    /// How long the LLM call `api_request_id` waits before it goes (a
    /// rate limit reached, `[rate_limit] action = "wait"`), taken once:
    /// Hermes's `llm_execution` middleware asks before it calls the
    /// provider.
    pub fn wait_for(&self, api_request_id: &str) -> Option<f64> {
        let mut entries = lock(&self.0.waits);
        let wait = entries.0.remove(api_request_id)?;
        entries.1.retain(|k| k != api_request_id);
        Some(wait)
    }

    /// Notes that the LLM call `api_request_id` waits `seconds`.
    pub(super) fn note_wait(&self, api_request_id: &str, seconds: f64) {
        note(&self.0.waits, api_request_id, Some(seconds));
    }

    /// Notes whether `session_id`'s calls are downgraded, and by which
    /// `[downgrade]` table.
    pub(super) fn note_downgrade(&self, session_id: &str, routes: Option<Arc<Downgrade>>) {
        note(&self.0.downgrades, session_id, routes);
    }
}

/// Keeps `value` under `key`, or forgets the key for `None`.
fn note<V>(map: &Recent<V>, key: &str, value: Option<V>) {
    match value {
        Some(v) => remember(map, key, v),
        None => {
            let mut entries = lock(map);
            if entries.0.remove(key).is_some() {
                entries.1.retain(|s| s != key);
            }
        }
    }
}

/// Keeps `text` under `key`, the oldest keys going past [`MAX_STOPS`].
fn remember<V>(map: &Recent<V>, key: &str, text: V) {
    let mut stops = lock(map);
    if stops.0.insert(key.to_string(), text).is_none() {
        stops.1.push_back(key.to_string());
    }
    while stops.1.len() > MAX_STOPS {
        if let Some(old) = stops.1.pop_front() {
            stops.0.remove(&old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_holds_for_every_attempt_and_the_oldest_go_past_the_bound() {
        let handle = BudgetHandle::default();
        for i in 0..=MAX_STOPS {
            handle.stop(&format!("r{i}"), format!("stop {i}"));
        }
        assert_eq!(handle.stop_for("r0"), None, "the oldest went first");
        assert_eq!(handle.stop_for("r1").as_deref(), Some("stop 1"));
        assert_eq!(
            handle.stop_for("r1").as_deref(),
            Some("stop 1"),
            "a retry is stopped too"
        );
        assert_eq!(lock(&handle.0.stops).1.len(), MAX_STOPS);
    }

    #[test]
    fn a_refused_pause_is_offered_again_until_its_tries_run_out() {
        let handle = BudgetHandle::default();
        let now = Instant::now();
        let pause = CronPause {
            job_id: "job".into(),
            reason: "why".into(),
            attempt: 1,
        };
        assert!(handle.pause_failed(pause.clone(), now));
        assert!(handle.take_pauses_at(now).is_empty(), "not due yet");
        let again = handle.take_pauses_at(now + PAUSE_RETRY);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].attempt, 2);
        let last = CronPause {
            attempt: MAX_PAUSE_ATTEMPTS,
            ..pause
        };
        assert!(!handle.pause_failed(last, now), "given up");
    }
}
