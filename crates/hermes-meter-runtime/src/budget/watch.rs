//! The runaway watch: the gate's view of every committed event, for the
//! signs of a loop (`runaway.rs`), on the bridge's writer thread.
//!
//! Owns: streaks of identical tool calls per session, how often a run's
//! signs are read, the runs stopped as runaways (with `action = "stop"`),
//! and raising the runaway alert, once per run. Must not touch: Python,
//! SQL (the signs are `Reader::run_signs`), the quick view's rule (it only
//! clears it).

use std::collections::HashMap;

use super::gate::BudgetGate;
use crate::lock;
use hermes_meter_model::budget::{self, alert, verdict, RunawayAction};
use hermes_meter_model::hook::{Hook, HookEvent};
use hermes_meter_store::{LogPlace, Reader, Writer};

/// How often one session's run signs are read again (its calls are many
/// when it loops; one read a second sees a loop within a second).
const CHECK_EVERY_S: f64 = 1.0;

/// Most sessions watched at once; past this the watch starts over.
const MAX_WATCHED: usize = 4096;

/// What the watch remembers between events.
#[derive(Debug, Default)]
pub(super) struct RunawayWatch {
    /// Per session: the last tool call's tool and argument digest, and how
    /// many times in a row it came.
    streaks: HashMap<String, (String, String, u64)>,
    /// Per session: when its run signs may be read again.
    next_check: HashMap<String, f64>,
    /// Root sessions whose run is stopped: their stop text.
    pub(super) stopped: HashMap<String, String>,
}

impl BudgetGate {
    /// The action in force: `stop` acts as `alert` in observe mode.
    pub(super) fn runaway_action(&self) -> RunawayAction {
        match (self.cfg.runaway.action, self.mode()) {
            (RunawayAction::Stop, budget::BudgetMode::Observe) => RunawayAction::Alert,
            (action, _) => action,
        }
    }

    /// Looks at one committed event for the signs of a runaway.
    pub(super) fn watch(&mut self, store: &Writer, event: &HookEvent) -> hermes_meter_store::Result<()> {
        let cfg = self.cfg.runaway;
        if cfg.action == RunawayAction::Off {
            return Ok(());
        }
        let w = &mut self.runaway;
        if w.streaks.len() > MAX_WATCHED || w.next_check.len() > MAX_WATCHED {
            w.streaks.clear();
            w.next_check.clear();
        }
        match &event.hook {
            // A new message is a new run: it starts with a clean slate.
            Hook::PreLlmCall(e) => {
                w.streaks.remove(&e.session_id);
                if w.stopped.remove(&e.session_id).is_some() {
                    self.arm();
                }
                Ok(())
            }
            Hook::PreToolCall(e) => {
                let Some(digest) = &e.args_digest else { return Ok(()) };
                let t = &e.tool;
                let streak = match w.streaks.get_mut(&t.session_id) {
                    Some((tool, d, n)) if *tool == t.tool_name && d == digest => {
                        *n += 1;
                        *n
                    }
                    _ => {
                        let first = (t.tool_name.clone(), digest.clone(), 1);
                        w.streaks.insert(t.session_id.clone(), first);
                        1
                    }
                };
                match budget::repeat_reason(&cfg, &t.tool_name, streak) {
                    Some(reason) => self.flag(store, &t.session_id, &reason, event.at),
                    None => Ok(()),
                }
            }
            // Retries are counted from the ledger: Hermes 0.22's recovery
            // cycles restart retry_count at 0 for the same request.
            Hook::ApiRequestError(e) => match budget::retry_reason(
                &cfg,
                (store.failed_attempts(&e.api.api_request_id)? - 1).max(e.retry_count),
            ) {
                Some(reason) => self.flag(store, &e.api.session_id, &reason, event.at),
                None => Ok(()),
            },
            Hook::PostApiRequest(e) => {
                let session = &e.api.session_id;
                if w.next_check.get(session).is_some_and(|t| event.at < *t) {
                    return Ok(());
                }
                w.next_check.insert(session.clone(), event.at + CHECK_EVERY_S);
                let Some((_, _, signs)) = store.run_signs(session, event.at)? else {
                    return Ok(());
                };
                match budget::runaway_reason(&cfg, &signs) {
                    Some(reason) => self.flag(store, session, &reason, event.at),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// Raises the runaway alert of `session`'s run (once per run, across
    /// processes), logs it, and with `action = "stop"` stops the run.
    fn flag(&mut self, store: &Writer, session: &str, reason: &str, at: f64) -> hermes_meter_store::Result<()> {
        let Some((root, turn)) = store.open_run(session)? else {
            return Ok(());
        };
        let action = self.runaway_action();
        let text = budget::runaway_text(&root, reason, action);
        if store.raise_pending_alert(alert::RUNAWAY, &format!("run|{turn}"), &text, at)? {
            // The run's open turn is its root session's.
            let place = LogPlace {
                session_id: Some(&root),
                turn_id: Some(&turn),
                span_id: None,
            };
            store.count_verdict(verdict::RUNAWAY, "run", budget::LIFETIME, at, place, &text)?;
            lock(&self.handle.0.messages).push(text.clone());
        }
        if action == RunawayAction::Stop && !self.runaway.stopped.contains_key(&root) {
            self.runaway.stopped.insert(root, text);
            // Headrooms measured before say nothing of a stopped run.
            let mut view = lock(&self.handle.0.quick);
            view.sessions.clear();
            view.universal = None;
            drop(view);
            self.arm();
        }
        Ok(())
    }

    /// The stop text of `session`'s run if it is stopped as a runaway.
    pub(super) fn runaway_stop(&self, store: &Reader, session: &str) -> hermes_meter_store::Result<Option<String>> {
        if self.runaway.stopped.is_empty() {
            return Ok(None);
        }
        let Some((root, _)) = store.open_run(session)? else {
            return Ok(None);
        };
        Ok(self.runaway.stopped.get(&root).cloned())
    }
}
