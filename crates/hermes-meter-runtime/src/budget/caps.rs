//! The per-session and per-run caps in the budget gate: their use read
//! for a verdict, and their notices. Must not touch: SQL (the store's
//! `Reader::cap_use`), the rules (`crates/hermes-meter-model/src/budget/caps.rs`).

use super::gate::BudgetGate;
use super::quick::Unseen;
use hermes_meter_model::budget::{self, alert, verdict, CapScope, CapState, Level};
use hermes_meter_store::{LogPlace, Reader, Writer};

impl BudgetGate {
    /// The caps of `session` and its current run now, read inside a
    /// snapshot the caller holds (see [`Reader::cap_use`]), and the tool
    /// calls from `tool_call_at` on, which they leave out.
    pub(super) fn caps_in(
        &self,
        store: &Reader,
        session: &str,
        now: f64,
        exclude: Option<&str>,
        tool_call_at: Option<f64>,
    ) -> hermes_meter_store::Result<(Vec<CapState>, Unseen)> {
        if self.cfg.caps.is_empty() {
            return Ok(Default::default());
        }
        let with_run = self.cfg.caps.contains_key(&CapScope::Run);
        let Some(used) = store.cap_use(session, now, exclude, tool_call_at, with_run)? else {
            return Ok(Default::default());
        };
        let mut out = budget::assess_caps(&self.cfg, CapScope::Session, &used.root, &used.session);
        if let Some((turn, run)) = &used.run {
            out.extend(budget::assess_caps(&self.cfg, CapScope::Run, turn, run));
        }
        let unseen = Unseen {
            usd: 0.0,
            tool_calls: used.tool_calls_after as f64,
        };
        Ok((out, unseen))
    }

    /// The alert-threshold, soft and hard notices of `caps`, once per
    /// session or run, cap and line, across processes.
    pub(super) fn cap_notices(
        &self,
        store: &Writer,
        caps: &[CapState],
        now: f64,
        place: LogPlace<'_>,
        texts: &mut Vec<String>,
    ) -> hermes_meter_store::Result<()> {
        let session = place.session_id.unwrap_or_default();
        for c in caps {
            let Some(t) = budget::cap_threshold_reached(&self.cfg, c) else {
                continue;
            };
            let text = budget::cap_threshold_text(c, t);
            if store.raise_alert_delivered(
                alert::BUDGET_THRESHOLD,
                &c.alert_key(&t.to_string()),
                &text,
                now,
                session,
            )? {
                store.log_alert(alert::BUDGET_THRESHOLD, &text, now, place)?;
                texts.push(text);
            }
        }
        for c in caps.iter().filter(|c| c.level >= Level::Soft) {
            let (kind, v) = match c.level {
                Level::Hard => (alert::BUDGET_HARD, verdict::HARD),
                _ => (alert::BUDGET_SOFT, verdict::SOFT),
            };
            let text = budget::cap_notice_text(c, self.mode());
            if store.raise_alert_delivered(kind, &c.alert_key(c.level.as_str()), &text, now, session)? {
                store.count_verdict(v, c.cap.scope.as_str(), budget::LIFETIME, now, place, &text)?;
                texts.push(text);
            }
        }
        Ok(())
    }
}
