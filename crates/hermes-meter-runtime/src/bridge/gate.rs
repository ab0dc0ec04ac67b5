//! The gate of the gating hooks: what a verdict is, what a gate must do
//! ([`Gate`], [`QuickGate`]), which hooks wait for one now ([`GateNeeds`]),
//! and (re-exported from `crates/hermes-meter-model/src/budget/spend_bound.rs`) the spend a queued call may
//! add ([`spend_bound`]). Budgets implement it in `budget/gate.rs`; [`NoGate`] says nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hermes_meter_model::hook::{Hook, HookEvent};
use hermes_meter_store::{Reader, Writer};

/// What a gating hook tells Hermes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `pre_tool_call`: `{"action": "block", "message": ...}`.
    Block { message: String },
    /// `pre_llm_call`: `{"context": ...}`, appended to the user message.
    Context { text: String },
}

/// Decides verdicts for the gating hooks (see [`is_gating`]).
///
/// Called on the writer thread right after the batch holding the event
/// committed, so it sees the store including that event. It must be quick
/// and must not do I/O beyond reading the store (and a rate-limited `stat`
/// of its configuration): every hook queued behind it waits. Budgets
/// implement this ([`crate::budget::BudgetGate`]); [`NoGate`] says nothing.
pub trait Gate: Send {
    /// The verdict for `event`, or `None` to let the call go ahead.
    fn verdict(&mut self, store: &Writer, event: &HookEvent) -> Option<Verdict>;

    /// Which gating hooks wait for their commit and a verdict. A gating hook
    /// whose flag is clear returns once spooled, like the observe-only hooks,
    /// so a gate with nothing to say (no budgets, no pending alert) costs
    /// Hermes no wait. The default: `pre_llm_call` and `pre_tool_call`
    /// always wait, `pre_api_request` never.
    fn needs(&self) -> Arc<GateNeeds> {
        GateNeeds::new(true, true, false)
    }

    /// Keeps the [`Gate::needs`] flags current: called on the writer thread
    /// after every batch and at least every [`GATE_REFRESH`] (other
    /// processes write the same store).
    fn refresh(&mut self, _store: &Reader) {}

    /// The part of the gate a hook thread may ask, without waiting, whether
    /// a gating event can go ahead with no verdict ([`QuickGate`]).
    fn quick(&self) -> Option<Arc<dyn QuickGate>> {
        None
    }

    /// Told before the verdicts of each batch: the spend bound of every
    /// event of this process applied so far, and its `pre_tool_call`
    /// events applied so far (see [`QueuedSpend`]).
    fn applied(&mut self, _spend_usd: f64, _tool_calls: u64) {}

    /// Shown every event this process committed, in order, before its
    /// verdict (the budget gate's runaway watch). Runs on the writer
    /// thread; must not fail.
    fn observe(&mut self, _store: &Writer, _event: &HookEvent) {}
}

/// What this process's hooks have submitted that can add to a budget's
/// spend: the sum of every event's upper bound (an LLM call's cost, a
/// request's reservation), and how many events not applied yet have no
/// known bound (an estimated usage, a model priced only by the host).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueuedSpend {
    pub usd: f64,
    pub unknown: u64,
    /// Every `pre_tool_call` this process's hooks submitted, ever (never
    /// taken back: an upper bound of what a tool-call cap counts).
    pub tool_calls: u64,
    /// Every `pre_api_request` this process's hooks submitted, ever (an
    /// upper bound of what a request rate limit counts).
    pub requests: u64,
}

/// Answers, on the hook thread, whether a gating event can go ahead with
/// no verdict: only when the verdict the writer would give after its commit
/// is surely none. `queued` is this process's [`QueuedSpend`], this event
/// included.
pub trait QuickGate: Send + Sync {
    fn no_verdict(&self, event: &HookEvent, queued: QueuedSpend) -> bool;

    /// Waits, on the hook thread and bounded, until the gate can decide
    /// `event` at all, before it is queued: the budget gate of a fleet host
    /// whose store never synced waits for the first sync
    /// ([`hermes_meter_model::budget::FIRST_SYNC_WAIT`], once a process). The default
    /// returns at once.
    fn settle(&self, _event: &HookEvent) {}
}

/// How often the writer calls [`Gate::refresh`] while no batch comes. It
/// bounds how old the budget gate's view of other processes' spend can be
/// (see `budget/quick.rs`); a refresh is a few indexed reads.
pub(crate) const GATE_REFRESH: Duration = Duration::from_millis(100);

/// Which gating hooks need a verdict now; shared between a gate (which sets
/// them on the writer thread) and the hook path (which reads them, lock-free).
#[derive(Debug, Default)]
pub struct GateNeeds {
    pub pre_llm_call: AtomicBool,
    pub pre_tool_call: AtomicBool,
    pub pre_api_request: AtomicBool,
}

impl GateNeeds {
    pub fn new(pre_llm_call: bool, pre_tool_call: bool, pre_api_request: bool) -> Arc<Self> {
        Arc::new(GateNeeds {
            pre_llm_call: AtomicBool::new(pre_llm_call),
            pre_tool_call: AtomicBool::new(pre_tool_call),
            pre_api_request: AtomicBool::new(pre_api_request),
        })
    }

    /// Whether any gating hook waits for a verdict now.
    pub fn any(&self) -> bool {
        [&self.pre_llm_call, &self.pre_tool_call, &self.pre_api_request]
            .iter()
            .any(|flag| flag.load(Ordering::Acquire))
    }

    /// Whether `hook` waits for its commit and verdict now.
    pub(super) fn waits(&self, hook: &Hook) -> bool {
        self.waits_named(hook.name())
    }

    /// [`GateNeeds::waits`] by the hook's name.
    pub(super) fn waits_named(&self, hook: &str) -> bool {
        let flag = match hook {
            "pre_llm_call" => &self.pre_llm_call,
            "pre_tool_call" => &self.pre_tool_call,
            "pre_api_request" => &self.pre_api_request,
            _ => return false,
        };
        flag.load(Ordering::Acquire)
    }
}

/// Whether `hook` can get a verdict: `pre_llm_call` and `pre_tool_call`,
/// whose return values Hermes uses, and `pre_api_request`, where the budget
/// gate decides whether the `llm_execution` middleware stops the call (its
/// verdict goes through the gate's own handle; Hermes ignores this hook's
/// return value). Whether it waits for one is the gate's [`Gate::needs`].
pub(crate) fn is_gating(hook: &Hook) -> bool {
    matches!(
        hook,
        Hook::PreLlmCall(_) | Hook::PreToolCall(_) | Hook::PreApiRequest(_)
    )
}

/// The gate that never objects.
#[derive(Debug, Default)]
pub(crate) struct NoGate;

impl Gate for NoGate {
    fn verdict(&mut self, _store: &Writer, _event: &HookEvent) -> Option<Verdict> {
        None
    }

    fn needs(&self) -> Arc<GateNeeds> {
        GateNeeds::new(false, false, false)
    }
}
