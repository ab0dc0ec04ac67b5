//! The quick view: how much more spend leaves a session's verdicts at
//! "nothing to say", measured at each verdict, so a gating hook can go
//! ahead on its own thread without waiting for the writer ([`QuickGate`]).
//!
//! Owns: [`Headroom`] and [`QuickView`], the answer of [`QuickGate`] for
//! the gate's shared state, and the gate's methods that measure headroom.
//! Must not touch: verdicts themselves (`gate.rs`), Python.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::gate::BudgetGate;
use super::handle::Shared;
use crate::bridge::{QueuedSpend, QuickGate};
use crate::lock;
use hermes_meter_model::budget::{BudgetState, BudgetUnit, CapState, CapUnit, Level};
use hermes_meter_model::hook::{Hook, HookEvent};
use hermes_meter_store::Reader;

/// How much more spend, anywhere, leaves the verdicts of one session (and
/// model) at "nothing to say", as measured at its last verdict.
#[derive(Debug, Clone, Copy)]
pub(super) struct Headroom {
    /// Before `pre_llm_call` has a notice to give: the nearest soft line.
    pub(super) notice_usd: f64,
    /// Before `pre_tool_call` or `pre_api_request` would be blocked: the
    /// nearest hard line.
    pub(super) block_usd: f64,
    /// This process's applied spend bound when measured (`Gate::applied`).
    pub(super) own_basis: f64,
    /// [`QuickView::cost`] when measured.
    pub(super) cost_basis: f64,
    /// Tool calls more before `pre_llm_call` has a tool-call cap's notice
    /// to give, and before `pre_tool_call` is blocked by one (infinite
    /// without a tool-call cap).
    pub(super) notice_tools: f64,
    pub(super) block_tools: f64,
    /// This process's applied `pre_tool_call` events when measured.
    pub(super) own_tools_basis: u64,
    /// [`QuickView::journal_seq`] when measured.
    pub(super) seq_basis: i64,
    /// Requests more before `pre_api_request` reaches a request rate limit
    /// (infinite without one).
    pub(super) block_requests: f64,
    /// This process's `pre_api_request` events the gate had seen when
    /// measured.
    pub(super) own_requests_basis: u64,
    /// [`QuickView::journal_seq`] when the requests were measured (a
    /// verdict other than `pre_api_request`'s keeps the last measure).
    pub(super) requests_seq_basis: i64,
}

/// What a verdict's states leave out although this process's bases
/// ([`Headroom::own_basis`], [`Headroom::own_tools_basis`]) already count
/// it as applied: a `pre_api_request`'s own reservation and, for a
/// `pre_tool_call`, the tool calls started with or after it. The headroom
/// is that much less, or the spend since would never count them.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Unseen {
    pub(super) usd: f64,
    pub(super) tool_calls: f64,
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
pub(super) struct QuickView {
    /// The cost of every LLM call recorded, any process, at the last refresh.
    pub(super) cost: f64,
    /// Every open reservation, any process.
    pub(super) reserved: f64,
    /// The journal's newest row at the last refresh: it moves by one per
    /// event any process recorded (retention keeps the newest row), so its
    /// growth bounds the tool calls other processes started since.
    pub(super) journal_seq: i64,
    /// An alert waits to be shown: `pre_llm_call` must wait for it.
    pub(super) alerts_pending: bool,
    /// `[runaway] action = "stop"` is in force: the call that shows a sign
    /// of a loop, or comes after one, is stopped, and only the runaway
    /// watch on the writer thread sees the signs, so `pre_tool_call` and
    /// `pre_api_request` always wait for their verdict.
    pub(super) stops_runaways: bool,
    /// A rate limit in USD or tokens is in force (enforce mode): every
    /// `pre_api_request` waits for its verdict (the view counts requests,
    /// not what they will use).
    pub(super) rate_limited: bool,
    /// The budget file does not parse and no limits were ever loaded: the
    /// gate holds every call (see `BudgetGate::invalid`), none goes ahead
    /// on the quick view.
    pub(super) held: bool,
    /// Keyed by [`quick_key`].
    pub(super) sessions: HashMap<String, Headroom>,
    /// The least headroom of every budget any session can count toward
    /// (a fresh sender or cron job under a default limit included): for
    /// sessions not measured yet.
    pub(super) universal: Option<Headroom>,
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

pub(super) fn quick_key(session: &str, model: Option<&str>) -> String {
    format!("{session}\x1f{}", model.unwrap_or(""))
}

impl QuickGate for Shared {
    /// A fleet host whose store never synced waits for its first sync
    /// (see `first_sync.rs`); any other returns at once.
    fn settle(&self, event: &HookEvent) {
        if crate::bridge::is_gating(&event.hook) {
            self.first_sync.wait();
        }
    }

    fn no_verdict(&self, event: &HookEvent, queued: QueuedSpend) -> bool {
        let (session, model, block) = match &event.hook {
            // Refused by the gate whatever the budgets say.
            Hook::PreToolCall(e) if e.meter_change.is_some() => return false,
            Hook::PreLlmCall(e) => (&e.session_id, e.model.as_deref(), false),
            Hook::PreToolCall(e) => (&e.tool.session_id, None, true),
            Hook::PreApiRequest(e) => (&e.api.session_id, e.api.model.as_deref(), true),
            _ => return false,
        };
        // Before a fleet host's first sync no headroom is known.
        if queued.unknown > 0 || !self.first_sync.is_ready() {
            return false;
        }
        let view = lock(&self.quick);
        let must_wait = if block {
            view.stops_runaways || view.held || (view.rate_limited && matches!(event.hook, Hook::PreApiRequest(_)))
        } else {
            view.alerts_pending
        };
        if must_wait {
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
        if grown + QUICK_MARGIN_USD >= if block { h.block_usd } else { h.notice_usd } {
            return false;
        }
        // A tool-call cap: every tool call this process submitted since
        // the measure and every event any process recorded since bound the
        // calls started since (a tool-call cap never stops an LLM call).
        let tools_line = match &event.hook {
            Hook::PreToolCall(_) => h.block_tools,
            Hook::PreLlmCall(_) => h.notice_tools,
            _ => f64::INFINITY,
        };
        if tools_line.is_finite() {
            if view.journal_seq < h.seq_basis {
                return false;
            }
            let grown = queued.tool_calls.saturating_sub(h.own_tools_basis) + (view.journal_seq - h.seq_basis) as u64;
            return (grown as f64) < tools_line;
        }
        // A request rate limit: every request this process submitted since
        // the measure (this one included) and every event any process
        // recorded since bound the requests started since.
        if matches!(event.hook, Hook::PreApiRequest(_)) && h.block_requests.is_finite() {
            if view.journal_seq < h.requests_seq_basis {
                return false;
            }
            let grown =
                queued.requests.saturating_sub(h.own_requests_basis) + (view.journal_seq - h.requests_seq_basis) as u64;
            return (grown as f64) < h.block_requests;
        }
        true
    }
}

impl BudgetGate {
    /// Keeps, for the quick verdicts, how far `states` (of `session` calling
    /// `model`, just read) are from their soft and hard lines, less what
    /// they left `unseen`, and the requests a `pre_api_request` verdict
    /// measured its request rate limits leave (`requests_left`).
    pub(super) fn record_headroom(
        &self,
        session: &str,
        model: Option<&str>,
        states: &[BudgetState],
        caps: &[CapState],
        unseen: Unseen,
        requests_left: Option<f64>,
    ) {
        let (notice, block) = self.headroom_of(states);
        let (cap_notice, cap_block) = self.cap_headroom(caps, CapUnit::Usd);
        let less = |line: f64, by: f64| (line - by).max(0.0);
        let (mut notice, mut block) = (
            less(notice.min(cap_notice), unseen.usd),
            less(block.min(cap_block), unseen.usd),
        );
        let (notice_tools, block_tools) = self.cap_headroom(caps, CapUnit::ToolCalls);
        let (notice_tools, block_tools) = (
            less(notice_tools, unseen.tool_calls),
            less(block_tools, unseen.tool_calls),
        );
        // While a run is stopped as a runaway, any session may be of it;
        // the view counts no tokens.
        if !self.runaway.stopped.is_empty() || self.cfg.counts_tokens() {
            (notice, block) = (0.0, 0.0);
        }
        let mut view = lock(&self.handle.0.quick);
        let key = quick_key(session, model);
        // The requests left before a request rate limit: this verdict's
        // measure (a `pre_api_request`'s), else the session's last one with
        // its bases, else the one of any session not measured yet, else none.
        let (block_requests, own_requests_basis, requests_seq_basis) = match requests_left {
            _ if !self.cfg.has_rate_limits() => (f64::INFINITY, 0, 0),
            Some(left) => (left, self.observed_requests, view.journal_seq),
            None => view
                .sessions
                .get(&key)
                .or(view.universal.as_ref())
                .map_or((0.0, 0, 0), |h| {
                    (h.block_requests, h.own_requests_basis, h.requests_seq_basis)
                }),
        };
        if view.sessions.len() >= MAX_QUICK_SESSIONS {
            view.sessions.clear();
        }
        let h = Headroom {
            notice_usd: notice,
            block_usd: block,
            own_basis: self.applied_usd,
            cost_basis: view.cost,
            notice_tools,
            block_tools,
            own_tools_basis: self.applied_tool_calls,
            seq_basis: view.journal_seq,
            block_requests,
            own_requests_basis,
            requests_seq_basis,
        };
        view.sessions.insert(key, h);
    }

    /// The fractions of a limit at which a verdict has something to say:
    /// the alert thresholds, the downgrade line, the soft line and the hard
    /// line.
    fn notice_lines(&self) -> impl Iterator<Item = f64> + '_ {
        let cfg = &self.cfg;
        cfg.alert_thresholds
            .iter()
            .copied()
            .chain(cfg.downgrade.as_ref().map(|d| d.at))
            .chain([cfg.soft_threshold, cfg.hard_threshold])
    }

    /// How far `states` are from their next notice line (an alert
    /// threshold not reached yet, or the soft line) and from their hard
    /// line (blocks, pauses); zero once soft or hard is reached.
    pub(super) fn headroom_of(&self, states: &[BudgetState]) -> (f64, f64) {
        let (mut notice, mut block) = (f64::INFINITY, f64::INFINITY);
        for s in states {
            if s.budget.unit == BudgetUnit::Tokens {
                // The view counts no tokens: nothing is left to go ahead on.
                return (0.0, 0.0);
            }
            let total = s.spend.total();
            let hard = s.budget.limit * self.cfg.hard_threshold;
            let next_line = self
                .notice_lines()
                .map(|f| s.budget.limit * f)
                .filter(|line| *line > total)
                .fold(f64::INFINITY, f64::min);
            notice = notice.min(if s.level >= Level::Soft { 0.0 } else { next_line - total });
            block = block.min(if s.blocks() { 0.0 } else { hard - total });
            // Past the downgrade line `pre_llm_call` waits too: its verdict
            // routes the turn's first call (Hermes asks `llm_request`
            // before that call's `pre_api_request`).
            let downgrade = self.downgrade_headroom(total, s.budget.limit);
            notice = notice.min(downgrade);
            block = block.min(downgrade);
            if let Some(f) = s.fleet {
                block = block.min(f.lease_left.max(0.0));
            }
        }
        (notice, block)
    }

    /// How far `used` of `limit` is from the `[downgrade]` line (infinite
    /// without one, 0 past it): every gated call of a session past it waits
    /// for the writer, whose verdict keeps the session's downgrade current
    /// for the `llm_request` middleware.
    fn downgrade_headroom(&self, used: f64, limit: f64) -> f64 {
        match &self.cfg.downgrade {
            Some(d) => (d.at * limit - used).max(0.0),
            None => f64::INFINITY,
        }
    }

    /// How far the `unit` caps among `caps` are from their next notice
    /// line and their hard line, in that unit (infinite without one).
    fn cap_headroom(&self, caps: &[CapState], unit: CapUnit) -> (f64, f64) {
        let (mut notice, mut block) = (f64::INFINITY, f64::INFINITY);
        for c in caps.iter().filter(|c| c.cap.unit == unit) {
            let next_line = self
                .notice_lines()
                .map(|f| c.cap.limit * f)
                .filter(|line| *line > c.used)
                .fold(f64::INFINITY, f64::min);
            notice = notice.min(if c.level >= Level::Soft {
                0.0
            } else {
                next_line - c.used
            });
            block = block.min(if c.level == Level::Hard {
                0.0
            } else {
                c.cap.limit * self.cfg.hard_threshold - c.used
            });
            if unit != CapUnit::ToolCalls {
                let downgrade = self.downgrade_headroom(c.used, c.cap.limit);
                notice = notice.min(downgrade);
                block = block.min(downgrade);
            }
        }
        (notice, block)
    }

    /// How far a family that used `peak` of `unit` is from the nearest
    /// notice line and hard line of the per-session and per-run caps in
    /// that unit (a run uses at most what its family used); infinite
    /// without one.
    fn peak_headroom(&self, unit: CapUnit, peak: f64) -> (f64, f64) {
        let lowest = self.notice_lines().fold(f64::INFINITY, f64::min);
        let (mut notice, mut block) = (f64::INFINITY, f64::INFINITY);
        for limit in self.cfg.caps.values().filter_map(|c| c.get(unit)) {
            notice = notice.min((limit * lowest - peak).max(0.0));
            block = block.min((limit * self.cfg.hard_threshold - peak).max(0.0));
            if unit != CapUnit::ToolCalls {
                let downgrade = self.downgrade_headroom(peak, limit);
                notice = notice.min(downgrade);
                block = block.min(downgrade);
            }
        }
        (notice, block)
    }

    /// Brings the quick view's store-wide figures up to date: the cost of
    /// every call recorded and every open reservation; at most every
    /// [`UNIVERSAL_REFRESH`], the universal headroom.
    pub(super) fn refresh_quick(&mut self, store: &Reader) -> hermes_meter_store::Result<()> {
        let (cost, reserved, journal_seq, peaks) = store.read_snapshot(|st| {
            Ok((
                st.spend_total()?,
                st.reserved_now()?,
                st.journal_seq()?,
                st.cap_peaks()?,
            ))
        })?;
        // A pull brought other hosts' spend: every headroom measured before
        // it is void.
        let fleet_version = if self.fleet { store.fleet_view_version()? } else { 0 };
        {
            let mut view = lock(&self.handle.0.quick);
            view.cost = cost;
            view.reserved = reserved;
            view.journal_seq = journal_seq;
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
            let lowest = self.notice_lines().fold(f64::INFINITY, f64::min);
            for limits in self.cfg.scopes.values() {
                for (_, _, limit) in limits.default.iter().filter(|(_, u, _)| *u == BudgetUnit::Usd) {
                    notice = notice.min(limit * lowest);
                    block = block.min(limit * self.cfg.hard_threshold / hosts as f64);
                    let downgrade = self.downgrade_headroom(0.0, limit);
                    notice = notice.min(downgrade);
                    block = block.min(downgrade);
                }
            }
            // A session not measured yet may be any session: one that spent
            // before this process started (its spend is inside the cost
            // basis) or a subagent deep in its run. Under a cap, it used at
            // most what the largest family used (the store's peaks, read
            // with the cost basis): its headroom is the cap's line less that.
            let (cap_notice, cap_block) = self.peak_headroom(CapUnit::Usd, peaks.0);
            let (notice_tools, block_tools) = self.peak_headroom(CapUnit::ToolCalls, peaks.1 as f64);
            (notice, block) = (notice.min(cap_notice), block.min(cap_block));
            // The view counts no tokens: under a token budget or cap every
            // gated call waits, as while a run is stopped as a runaway.
            if !self.runaway.stopped.is_empty() || self.cfg.counts_tokens() {
                (notice, block) = (0.0, 0.0);
            }
            // A session not measured yet: the global request limits' headroom
            // (none left under a scope's or an id's own request limit).
            let requests_left = self.global_requests_left(store, (self.clock)())?;
            lock(&self.handle.0.quick).universal = Some(Headroom {
                notice_usd: notice,
                block_usd: block,
                own_basis: self.applied_usd,
                cost_basis: cost,
                notice_tools,
                block_tools,
                own_tools_basis: self.applied_tool_calls,
                seq_basis: journal_seq,
                // A session not measured yet waits for its first request.
                block_requests: requests_left,
                own_requests_basis: self.observed_requests,
                requests_seq_basis: journal_seq,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_meter_model::hook::{ApiRequest, PreApiRequest, PreLlmCall, PreToolCall, ToolRef};

    fn tool_call(session: &str) -> HookEvent {
        HookEvent {
            at: 1.0,
            hook: Hook::PreToolCall(PreToolCall {
                tool: ToolRef {
                    session_id: session.into(),
                    ..ToolRef::default()
                },
                ..PreToolCall::default()
            }),
        }
    }

    fn api_request(session: &str) -> HookEvent {
        HookEvent {
            at: 1.0,
            hook: Hook::PreApiRequest(PreApiRequest {
                api: ApiRequest {
                    session_id: session.into(),
                    ..ApiRequest::default()
                },
                ..PreApiRequest::default()
            }),
        }
    }

    fn llm_call(session: &str) -> HookEvent {
        HookEvent {
            at: 1.0,
            hook: Hook::PreLlmCall(PreLlmCall {
                session_id: session.into(),
                ..PreLlmCall::default()
            }),
        }
    }

    /// Shared state whose session `s1` was measured with $1 to its soft
    /// line and $2 to its hard line, when this process had applied $0.5
    /// and the store had recorded $10.
    fn measured() -> Shared {
        let shared = Shared::default();
        let mut view = lock(&shared.quick);
        view.cost = 10.0;
        view.sessions.insert(
            quick_key("s1", None),
            Headroom {
                notice_usd: 1.0,
                block_usd: 2.0,
                own_basis: 0.5,
                cost_basis: 10.0,
                notice_tools: f64::INFINITY,
                block_tools: f64::INFINITY,
                own_tools_basis: 0,
                seq_basis: 0,
                block_requests: f64::INFINITY,
                own_requests_basis: 0,
                requests_seq_basis: 0,
            },
        );
        drop(view);
        shared
    }

    fn queued(usd: f64) -> QueuedSpend {
        QueuedSpend {
            usd,
            unknown: 0,
            tool_calls: 0,
            requests: 0,
        }
    }

    #[test]
    fn a_gating_call_goes_ahead_only_while_the_spend_since_stays_under_its_headroom() {
        let shared = measured();
        assert!(shared.no_verdict(&tool_call("s1"), queued(0.5)), "nothing spent since");
        assert!(
            shared.no_verdict(&tool_call("s1"), queued(2.0)),
            "$1.5 queued is under the $2 block line"
        );
        assert!(!shared.no_verdict(&tool_call("s1"), queued(2.5)), "$2 reaches it");
        assert!(
            !shared.no_verdict(&llm_call("s1"), queued(1.5)),
            "$1 reaches the notice line"
        );
        lock(&shared.quick).cost = 11.5;
        assert!(
            !shared.no_verdict(&tool_call("s1"), queued(1.0)),
            "other processes' $1.5 counts too"
        );
        lock(&shared.quick).cost = 10.0;
        lock(&shared.quick).reserved = 2.0;
        assert!(
            !shared.no_verdict(&tool_call("s1"), queued(0.5)),
            "open reservations count"
        );
    }

    #[test]
    fn a_tool_call_cap_answers_quickly_only_while_every_call_since_fits() {
        let shared = measured();
        {
            let mut view = lock(&shared.quick);
            view.journal_seq = 100;
            let h = view.sessions.get_mut(&quick_key("s1", None)).expect("measured");
            (h.block_tools, h.notice_tools, h.own_tools_basis, h.seq_basis) = (3.0, 2.0, 10, 100);
        }
        let calls = |tool_calls| QueuedSpend {
            usd: 0.5,
            unknown: 0,
            tool_calls,
            requests: 0,
        };
        assert!(shared.no_verdict(&tool_call("s1"), calls(12)), "2 calls since, 3 to go");
        assert!(
            !shared.no_verdict(&tool_call("s1"), calls(13)),
            "3 calls reach the hard line"
        );
        assert!(
            !shared.no_verdict(&llm_call("s1"), calls(12)),
            "2 reach the notice line"
        );
        lock(&shared.quick).journal_seq = 102;
        assert!(
            !shared.no_verdict(&tool_call("s1"), calls(11)),
            "other processes' events count"
        );
        lock(&shared.quick).journal_seq = 50;
        assert!(
            !shared.no_verdict(&tool_call("s1"), calls(10)),
            "a journal that went back is unknown"
        );
    }

    #[test]
    fn a_request_rate_limit_answers_quickly_only_while_every_request_since_fits() {
        let shared = measured();
        {
            let mut view = lock(&shared.quick);
            view.journal_seq = 100;
            let h = view.sessions.get_mut(&quick_key("s1", None)).expect("measured");
            (h.block_requests, h.own_requests_basis, h.requests_seq_basis) = (3.0, 10, 100);
        }
        let requests = |requests| QueuedSpend {
            usd: 0.5,
            unknown: 0,
            tool_calls: 0,
            requests,
        };
        assert!(
            shared.no_verdict(&api_request("s1"), requests(12)),
            "2 requests since, 3 left"
        );
        assert!(
            !shared.no_verdict(&api_request("s1"), requests(13)),
            "3 reach the limit"
        );
        lock(&shared.quick).journal_seq = 102;
        assert!(
            !shared.no_verdict(&api_request("s1"), requests(11)),
            "other processes' events count"
        );
        lock(&shared.quick).journal_seq = 100;
        lock(&shared.quick).rate_limited = true;
        assert!(
            !shared.no_verdict(&api_request("s1"), requests(11)),
            "a USD or token rate limit: every request waits"
        );
        assert!(shared.no_verdict(&tool_call("s1"), requests(11)), "not a tool call");
    }

    #[test]
    fn an_unmeasured_session_an_unknown_bound_or_a_pending_alert_waits() {
        let shared = measured();
        assert!(
            !shared.no_verdict(&tool_call("s2"), queued(0.5)),
            "no headroom known for s2"
        );
        let unknown = QueuedSpend {
            usd: 0.5,
            unknown: 1,
            tool_calls: 0,
            requests: 0,
        };
        assert!(!shared.no_verdict(&tool_call("s1"), unknown));
        lock(&shared.quick).alerts_pending = true;
        assert!(
            !shared.no_verdict(&llm_call("s1"), queued(0.5)),
            "the alert must be shown"
        );
        assert!(
            shared.no_verdict(&tool_call("s1"), queued(0.5)),
            "a tool call shows no alert"
        );
    }
}
