//! `hermes-meter advise`: the largest savings the ledger alone can show,
//! each with its figure and the sessions behind it.
//!
//! - **Context re-sent without the cache**: a call whose prompt holds the
//!   session's previous prompt again (agents re-send the conversation each
//!   turn) but read little of it from the provider's prompt cache, on a
//!   model whose table prices cache reads below input: what reading it
//!   from the cache would have saved.
//! - **Near-runaway streaks**: the same tool called again and again in one
//!   turn, from half the runaway watch's streak up to just below it (the
//!   watch alerts at its streak): the LLM calls the turn made after the
//!   streak began.
//! - **Tool results that fill the prompt**: a tool whose results, sent
//!   again with every call after them, make up at least a quarter of the
//!   prompt tokens the window sent: what they cost as context at the input
//!   rate (the most trimming them could save).
//! - **A dearer model for the same work**: each kind of session (cron,
//!   cli, a gateway's platform, subagents, auxiliary tasks) on a model
//!   priced above another model the operator already uses for that kind:
//!   its calls' tokens at the cheaper model's rates. Tokens differ across
//!   models and quality is not measured: a lead to try, not a promise.
//!
//! Owns: the rules and their figures. Must not touch: the store (the
//! caller hands calls and tool calls over, a session at a time, in order)
//! or the text printed.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::hook::Usage;
use crate::price_as::RecordedCall;
use crate::pricing::{PriceTable, HELD};

/// A prompt shorter than this is not worth a finding about its cache.
const CACHE_WORTH_TOKENS: i64 = 2048;
/// A model must make this many calls of a kind to be compared.
const COMPARED_CALLS: i64 = 5;
/// A tool's results fill the prompt when their re-sent tokens are at least
/// this share of all prompt tokens sent...
const TOOL_SHARE: f64 = 0.25;
/// ...and each result added at least this many tokens on average.
const TOOL_ADDED_TOKENS: f64 = 1000.0;
/// Sessions named per finding.
const SESSIONS_NAMED: usize = 5;

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// `uncached_context`, `near_runaway` or `dearer_model`.
    pub kind: &'static str,
    /// One line saying it.
    pub title: String,
    /// What the window would have cost less, USD (an estimate).
    pub savings_usd: f64,
    /// The figures behind it.
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// The sessions it is seen in, largest share first.
    pub sessions: Vec<String>,
}

/// The advice of a window: findings, largest saving first.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Advice {
    pub schema: &'static str,
    pub since: f64,
    pub until: f64,
    pub llm_calls: i64,
    pub cost_usd: f64,
    pub findings: Vec<Finding>,
}

/// The advice's schema name.
pub const SCHEMA: &str = "hermes-meter.advice.v1";

#[derive(Default)]
struct Share {
    usd: f64,
    tokens: i64,
    by_session: HashMap<String, f64>,
}

impl Share {
    fn add(&mut self, session: &str, usd: f64, tokens: i64) {
        self.usd += usd;
        self.tokens += tokens;
        *self.by_session.entry(session.to_string()).or_default() += usd;
    }

    fn top_sessions(&self) -> Vec<String> {
        let mut s: Vec<(&String, &f64)> = self.by_session.iter().collect();
        s.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
        s.into_iter().take(SESSIONS_NAMED).map(|(k, _)| k.clone()).collect()
    }
}

/// One model's calls in one kind of session: their summed usage, what
/// they were billed, how many, and by session.
#[derive(Default)]
struct Work {
    usage: Usage,
    billed: f64,
    calls: i64,
    by_session: HashMap<String, f64>,
}

/// Takes a window's calls a session at a time and says what they show.
pub struct Advisor<'p> {
    prices: &'p PriceTable,
    since: f64,
    until: f64,
    llm_calls: i64,
    cost_usd: f64,
    /// The previous call's prompt, per session (the caller hands a session's
    /// calls in order; one session is open at a time).
    open: Option<(String, i64)>,
    uncached: BTreeMap<String, Share>,
    /// Per (kind, model): the summed usage and what it was billed.
    work: BTreeMap<(String, String), Work>,
    streaks: Share,
    streak_count: i64,
    /// Prompt tokens every call sent.
    prompt_tokens: i64,
    /// Per tool: (results, tokens they added, their re-sent tokens and cost
    /// by session).
    tools: BTreeMap<String, (i64, f64, Share)>,
}

impl<'p> Advisor<'p> {
    pub fn new(prices: &'p PriceTable, since: f64, until: f64) -> Self {
        Advisor {
            prices,
            since,
            until,
            llm_calls: 0,
            cost_usd: 0.0,
            open: None,
            uncached: BTreeMap::new(),
            work: BTreeMap::new(),
            streaks: Share::default(),
            streak_count: 0,
            prompt_tokens: 0,
            tools: BTreeMap::new(),
        }
    }

    /// One LLM call of `session`, in the order the session made them.
    pub fn call(&mut self, session: &str, call: &RecordedCall) {
        if call.cost_source == HELD {
            return;
        }
        self.llm_calls += 1;
        self.cost_usd += call.cost_usd;
        let u = &call.usage;
        let prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens;
        self.prompt_tokens += prompt;
        let previous = match &self.open {
            Some((s, p)) if s == session => *p,
            _ => 0,
        };
        self.open = Some((session.to_string(), prompt));
        // The part of this prompt the previous one already held, less what
        // the cache gave back, at what reading it would have saved.
        let repeated = previous.min(prompt);
        let missed = (repeated - u.cache_read_tokens).max(0);
        if !call.estimated && missed >= CACHE_WORTH_TOKENS {
            if let (Some(p), _) = self.prices.lookup_at(&call.model, call.provider.as_deref(), call.at) {
                let p = self.prices.resolved(&p.for_prompt(prompt));
                let read = p.cache_read.unwrap_or(p.input);
                if read < p.input {
                    let saved = missed as f64 * (p.input - read) / 1e6;
                    self.uncached
                        .entry(call.model.clone())
                        .or_default()
                        .add(session, saved, missed);
                }
            }
        }
        let w = self.work.entry((call.kind.clone(), call.model.clone())).or_default();
        w.usage.input_tokens += u.input_tokens;
        w.usage.output_tokens += u.output_tokens;
        w.usage.cache_read_tokens += u.cache_read_tokens;
        w.usage.cache_write_tokens += u.cache_write_tokens;
        w.usage.reasoning_tokens += u.reasoning_tokens;
        w.billed += call.cost_usd;
        w.calls += 1;
        *w.by_session.entry(session.to_string()).or_default() += call.cost_usd;
    }

    /// A streak of `length` calls of one tool in a turn of `session`, and
    /// what the turn's LLM calls after its start cost.
    pub fn streak(&mut self, session: &str, length: i64, cost_after_usd: f64) {
        self.streak_count += 1;
        self.streaks.add(session, cost_after_usd, length);
    }

    /// A tool's result in `session`: the `added` tokens it grew the next
    /// call's prompt by (its share), sent again by `calls_after` calls from
    /// that one on, made on `model` through `provider` at `at`.
    #[allow(clippy::too_many_arguments)]
    pub fn tool_result(
        &mut self,
        tool: &str,
        session: &str,
        model: &str,
        provider: Option<&str>,
        at: f64,
        added: f64,
        calls_after: i64,
    ) {
        let resent = added * calls_after as f64;
        let input = match self.prices.lookup_at(model, provider, at) {
            (Some(p), _) => p.input,
            (None, _) => 0.0,
        };
        let t = self.tools.entry(tool.to_string()).or_default();
        t.0 += 1;
        t.1 += added;
        t.2.add(session, resent * input / 1e6, resent as i64);
    }

    /// The findings, largest saving first.
    pub fn finish(self) -> Advice {
        let mut findings = Vec::new();
        for (model, share) in &self.uncached {
            findings.push(Finding {
                kind: "uncached_context",
                title: format!(
                    "{model}: {} prompt tokens re-sent without the prompt cache; reading them from it would have cost less",
                    share.tokens
                ),
                savings_usd: share.usd,
                evidence: BTreeMap::from([
                    ("model".into(), model.clone().into()),
                    ("repeated_uncached_tokens".into(), share.tokens.into()),
                ]),
                sessions: share.top_sessions(),
            });
        }
        for (tool, (results, added, share)) in &self.tools {
            let of_all = share.tokens as f64 / self.prompt_tokens.max(1) as f64;
            let per_result = *added / (*results).max(1) as f64;
            if of_all < TOOL_SHARE || per_result < TOOL_ADDED_TOKENS {
                continue;
            }
            findings.push(Finding {
                kind: "tool_output",
                title: format!(
                    "{tool}'s results, sent again with every call after them, were {:.0}% of the prompt tokens sent ({} tokens); \
                     trimming what it returns would cut that cost",
                    of_all * 100.0,
                    share.tokens
                ),
                savings_usd: share.usd,
                evidence: BTreeMap::from([
                    ("tool".into(), tool.clone().into()),
                    ("results".into(), (*results).into()),
                    ("tokens_added_per_result".into(), (*added / (*results).max(1) as f64).round().into()),
                    ("share_of_prompt_tokens".into(), ((of_all * 1000.0).round() / 1000.0).into()),
                ]),
                sessions: share.top_sessions(),
            });
        }
        if self.streak_count > 0 {
            findings.push(Finding {
                kind: "near_runaway",
                title: format!(
                    "{} turns called one tool again and again, just short of the runaway watch's streak",
                    self.streak_count
                ),
                savings_usd: self.streaks.usd,
                evidence: BTreeMap::from([
                    ("turns".into(), self.streak_count.into()),
                    ("tool_calls_in_streaks".into(), self.streaks.tokens.into()),
                ]),
                sessions: self.streaks.top_sessions(),
            });
        }
        // Per kind of session: every model it used against the cheapest
        // of them at the same tokens.
        let mut kinds: BTreeMap<&str, Vec<(&str, &Work)>> = BTreeMap::new();
        for ((kind, model), w) in &self.work {
            if w.calls >= COMPARED_CALLS {
                kinds.entry(kind.as_str()).or_default().push((model.as_str(), w));
            }
        }
        for (kind, models) in kinds {
            for (model, w) in &models {
                let best = models
                    .iter()
                    .filter(|(other, _)| other != model)
                    .map(|(other, _)| (*other, self.prices.cost(other, None, &w.usage, self.until).usd))
                    .filter(|(other, _)| self.prices.lookup(other, None).0.is_some())
                    .min_by(|a, b| a.1.total_cmp(&b.1));
                let Some((cheaper, at_cheaper)) = best else { continue };
                let saved = w.billed - at_cheaper;
                if saved <= 0.0 || at_cheaper >= w.billed * 0.5 {
                    continue;
                }
                let mut share = Share::default();
                for (s, usd) in &w.by_session {
                    share.add(s, *usd, 0);
                }
                findings.push(Finding {
                    kind: "dearer_model",
                    title: format!(
                        "{kind} sessions on {model} cost ${:.4}; their tokens at {cheaper}'s prices, a model you also use for {kind}, ${at_cheaper:.4} (tokens differ across models; quality is not measured)",
                        w.billed
                    ),
                    savings_usd: saved,
                    evidence: BTreeMap::from([
                        ("kind".into(), kind.into()),
                        ("model".into(), (*model).into()),
                        ("cheaper_model".into(), cheaper.into()),
                        ("llm_calls".into(), w.calls.into()),
                        ("billed_usd".into(), w.billed.into()),
                        ("at_cheaper_usd".into(), at_cheaper.into()),
                    ]),
                    sessions: share.top_sessions(),
                });
            }
        }
        findings.sort_by(|a, b| b.savings_usd.total_cmp(&a.savings_usd).then(a.kind.cmp(b.kind)));
        Advice {
            schema: SCHEMA,
            since: self.since,
            until: self.until,
            llm_calls: self.llm_calls,
            cost_usd: self.cost_usd,
            findings,
        }
    }
}
