//! Budgets end to end in Rust: hook events applied to a real store, the
//! budget gate deciding on them, the budget file reloaded, and two OS
//! processes spending against one limit.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hermes_meter_test_support::budget_events;
use hermes_meter_test_support::hooks;

use budget_events::{event, post_api, pre_api, pre_tool, CALL_USD};
use hermes_meter_model::budget::{Scope, BLOCKED_MODEL};
use hermes_meter_model::hook::{DecodeOptions, HookEvent};
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig, Gate, Outcome, QueuedSpend, Verdict};
use hermes_meter_runtime::budget::BudgetGate;
use hermes_meter_store::{EventContext, Outbox, Writer};
use serde_json::{json, Value};

fn apply(store: &mut Writer, e: &HookEvent) {
    store.apply(e, &EventContext::default()).expect("apply");
}

fn pre_llm(session: &str, turn: &str, at: f64, platform: &str, sender: &str) -> HookEvent {
    event(
        "pre_llm_call",
        at,
        json!({"session_id": session, "turn_id": turn, "model": "gpt-4o", "platform": platform, "sender_id": sender}),
    )
}

fn write_budgets(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("budgets.toml");
    std::fs::write(&path, text).expect("write budgets");
    path
}

static NOW: AtomicU64 = AtomicU64::new(0);

fn set_now(t: f64) {
    NOW.store(t.to_bits(), Ordering::SeqCst);
}

fn now() -> f64 {
    f64::from_bits(NOW.load(Ordering::SeqCst))
}

fn ts(text: &str) -> f64 {
    text.parse::<jiff::Timestamp>().expect("timestamp").as_second() as f64
}

fn context(v: Option<Verdict>) -> Option<String> {
    match v {
        Some(Verdict::Context { text }) => Some(text),
        None => None,
        other => panic!("expected a context, got {other:?}"),
    }
}

/// Every scenario below that uses the fake clock runs in this one test,
/// because the clock is a process-wide static.
#[test]
fn budgets_decide_with_a_clock() {
    a_subagent_counts_toward_its_roots_cron_job_sender_and_profile();
    soft_notice_once_then_tool_block_until_the_limit_is_raised();
    the_window_rolls_over_at_local_midnight_in_a_non_utc_zone();
    a_rolling_budget_blocks_until_enough_of_its_spend_leaves_the_window();
    a_rate_limit_stops_the_call_past_it_or_holds_it_back_until_it_fits();
    observe_mode_notices_but_never_blocks();
    estimated_costs_are_flagged_and_can_soften_a_hard_verdict();
    a_stopped_llm_call_and_a_paused_cron_job();
    a_bogus_usage_figure_is_held_and_blocks_no_budget();
    a_confirmed_held_call_is_billed_in_its_run_budgets_report_and_metric(false);
    a_confirmed_held_call_is_billed_in_its_run_budgets_report_and_metric(true);
    a_run_cap_on_tool_calls_counts_its_subagents_and_ends_with_the_run();
    a_session_cap_counts_its_subagents_reservations_and_stops_llm_calls();
    a_token_cap_counts_the_tokens_the_file_names();
    a_calendar_token_budget_counts_what_an_unpriced_model_used();
    a_downgrade_routes_the_next_calls_and_prices_them_as_the_cheaper_model();
}

fn subagent(parent: &str, turn: &str, child: &str, at: f64) -> HookEvent {
    event(
        "subagent_start",
        at,
        json!({"parent_session_id": parent, "child_session_id": child, "parent_turn_id": turn}),
    )
}

fn end_turn(session: &str, turn: &str, at: f64) -> HookEvent {
    event(
        "post_llm_call",
        at,
        json!({"session_id": session, "turn_id": turn, "model": "gpt-4o", "completed": true}),
    )
}

fn blocked(v: Option<Verdict>) -> String {
    match v {
        Some(Verdict::Block { message }) => message,
        other => panic!("expected a block, got {other:?}"),
    }
}

/// A runaway terminal loop: the fourth tool call of a run is blocked, a
/// subagent's calls count toward its parent's run, LLM calls go on (the
/// model can still answer), and the next run starts afresh.
fn a_run_cap_on_tool_calls_counts_its_subagents_and_ends_with_the_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "[per_run]\ntool_calls = 3\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let handle = gate.handle();
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    let s = "s-loop";
    apply(&mut store, &pre_llm(s, "s:t1", t, "cli", ""));
    let tool = |store: &mut Writer, gate: &mut BudgetGate, session: &str, call: &str, at: f64| {
        let e = pre_tool(session, call, at);
        apply(store, &e);
        gate.verdict(store, &e)
    };
    assert_eq!(tool(&mut store, &mut gate, s, "c1", t + 1.0), None);
    assert_eq!(tool(&mut store, &mut gate, s, "c2", t + 2.0), None);
    apply(&mut store, &subagent(s, "s:t1", "s-child", t + 3.0));
    assert_eq!(tool(&mut store, &mut gate, "s-child", "k1", t + 4.0), None, "the third");
    let message = blocked(tool(&mut store, &mut gate, s, "c3", t + 5.0));
    assert!(message.contains("per-run tool_calls cap of this run"), "{message}");
    assert!(message.contains("3 tool calls used of 3 tool calls"), "{message}");
    let message = blocked(tool(&mut store, &mut gate, "s-child", "k2", t + 6.0));
    assert!(message.contains("per-run tool_calls"), "the subagent too: {message}");
    // The model may still answer: its LLM calls are not stopped.
    let api = pre_api(s, "a1", t + 7.0);
    apply(&mut store, &api);
    assert_eq!(gate.verdict(&store, &api), None);
    assert_eq!(handle.stop_for("a1"), None);
    assert_eq!(handle.session_stop(s), None, "auxiliary calls are not stopped either");
    // The pre_llm_call of the next run says nothing; its tools run again.
    apply(&mut store, &end_turn(s, "s:t1", t + 8.0));
    let next = pre_llm(s, "s:t2", t + 9.0, "cli", "");
    apply(&mut store, &next);
    assert_eq!(context(gate.verdict(&store, &next)), None);
    assert_eq!(tool(&mut store, &mut gate, s, "c4", t + 10.0), None);
    let counts = store.budget_verdict_counts().expect("counts");
    assert_eq!(
        counts,
        vec![
            ("soft", 0),
            ("hard", 0),
            ("blocked", 2),
            ("paused", 0),
            ("runaway", 0),
            ("waited", 0)
        ]
    );
    let metric: f64 = store
        .query_scalar(
            "SELECT TOTAL(value) FROM metric_series WHERE metric = 'hermes.budget.verdicts' \
             AND attrs LIKE '%\"run\"%' AND attrs LIKE '%\"lifetime\"%' AND attrs LIKE '%\"blocked\"%'",
        )
        .expect("counter");
    assert_eq!(metric, 2.0, "hermes.budget.verdicts counts them as the run scope");
}

/// A session's cap holds every turn and subagent of it; a subagent's call
/// in flight counts, so the parent's next call is stopped before the
/// provider, and the next turn's pre_llm_call says why.
fn a_session_cap_counts_its_subagents_reservations_and_stops_llm_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "[per_session]\nusd = 0.1\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let handle = gate.handle();
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    let s = "s-capped";
    apply(&mut store, &pre_llm(s, "s:t1", t, "cli", ""));
    for n in 0..2 {
        apply(&mut store, &post_api(s, &format!("a{n}"), t + n as f64, true));
    }
    apply(&mut store, &end_turn(s, "s:t1", t + 3.0));
    // $0.05 of $0.10: the next turn is fine, and another session is not affected.
    let t2 = pre_llm(s, "s:t2", t + 4.0, "cli", "");
    apply(&mut store, &t2);
    assert_eq!(context(gate.verdict(&store, &t2)), None);
    apply(&mut store, &post_api(s, "a2", t + 5.0, true));
    apply(&mut store, &subagent(s, "s:t2", "s-sub", t + 6.0));
    // $0.075 recorded and the subagent's $0.025 in flight: $0.10.
    apply(&mut store, &pre_api("s-sub", "b0", t + 7.0));
    let own = pre_api(s, "a3", t + 8.0);
    apply(&mut store, &own);
    gate.verdict(&store, &own);
    let text = handle.stop_for("a3").expect("stopped");
    assert!(text.contains("per-session usd cap of this session"), "{text}");
    assert!(text.contains("$0.10 used of $0.10"), "{text}");
    assert_eq!(handle.session_stop(s).as_deref(), Some(text.as_str()));
    // The stand-in response ends the stopped call and its reservation.
    let mut stand_in = post_api(s, "a3", t + 8.5, false);
    if let hermes_meter_model::hook::Hook::PostApiRequest(p) = &mut stand_in.hook {
        p.response_model = Some(BLOCKED_MODEL.into());
    }
    apply(&mut store, &stand_in);
    // The subagent's own call is not held against itself.
    let sub = pre_api("s-sub", "b0", t + 7.0);
    assert_eq!(gate.verdict(&store, &sub), None);
    assert_eq!(handle.stop_for("b0"), None, "$0.075 without its own reservation");
    apply(&mut store, &post_api("s-sub", "b0", t + 9.0, true));
    assert!(blocked(gate.verdict(&store, &pre_tool(s, "c1", t + 10.0))).contains("per-session usd"));
    apply(&mut store, &end_turn(s, "s:t2", t + 11.0));
    let t3 = pre_llm(s, "s:t3", t + 12.0, "cli", "");
    apply(&mut store, &t3);
    let notice = context(gate.verdict(&store, &t3)).expect("hard notice");
    assert!(
        notice.contains("per-session usd cap of this session") && notice.contains("is used up"),
        "{notice}"
    );
    assert_eq!(context(gate.verdict(&store, &t3)), None, "said once a session");
    let other = pre_llm("s-fresh", "f:t1", t + 12.0, "cli", "");
    apply(&mut store, &other);
    assert_eq!(context(gate.verdict(&store, &other)), None);
    assert_eq!(gate.verdict(&store, &pre_tool("s-fresh", "c1", t + 13.0)), None);
}

/// `tokens_counted` picks the tokens a token cap counts; in observe mode a
/// cap notices and blocks nothing.
fn a_token_cap_counts_the_tokens_the_file_names() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(dir.path(), "[per_session]\ntokens = 20000\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    let s = "s-tokens";
    apply(&mut store, &pre_llm(s, "s:t1", t, "cli", ""));
    apply(&mut store, &post_api(s, "a0", t + 1.0, true));
    apply(&mut store, &post_api(s, "a1", t + 2.0, true));
    // 20,000 input tokens, recorded at $0.05: the cap is tokens, not dollars.
    let message = blocked(gate.verdict(&store, &pre_tool(s, "c1", t + 3.0)));
    assert!(message.contains("20000 tokens used of 20000 tokens"), "{message}");
    std::fs::write(&path, "tokens_counted = \"output\"\n[per_session]\ntokens = 20000\n").expect("rewrite");
    gate.reload_if_changed(true);
    assert_eq!(
        gate.verdict(&store, &pre_tool(s, "c2", t + 4.0)),
        None,
        "no output tokens"
    );
    std::fs::write(&path, "mode = \"observe\"\n[per_session]\ntokens = 20000\n").expect("rewrite");
    gate.reload_if_changed(true);
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c3", t + 5.0)), None);
    let t2 = pre_llm(s, "s:t2", t + 6.0, "cli", "");
    apply(&mut store, &t2);
    let notice = context(gate.verdict(&store, &t2)).expect("notice");
    assert!(notice.contains("observe mode: nothing is blocked"), "{notice}");
}

/// A store, its budget file holding `budgets`, a gate on them and the fake
/// clock set to noon of 2026-11-30 UTC (`t`).
struct Scene {
    _dir: tempfile::TempDir,
    path: PathBuf,
    store: Writer,
    gate: BudgetGate,
    handle: hermes_meter_runtime::budget::BudgetHandle,
    t: f64,
}

fn scene(budgets: &str) -> Scene {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(dir.path(), budgets);
    let store = Writer::open_dir(dir.path()).expect("open");
    let gate = gate(dir.path());
    let handle = gate.handle();
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    Scene {
        _dir: dir,
        path,
        store,
        gate,
        handle,
        t,
    }
}

/// A call of a model no price table knows (a local model, a subscription):
/// $0 to a USD budget, its tokens to a token one.
fn local_call(session: &str, id: &str, at: f64, input: i64, output: i64) -> [HookEvent; 2] {
    let base = json!({"session_id": session, "turn_id": format!("{session}:t"), "api_request_id": id,
                      "model": "local/llama-3-70b", "platform": "cli"});
    let mut pre = base.clone();
    pre["approx_input_tokens"] = input.into();
    pre["max_tokens"] = 0.into();
    let mut post = base;
    post["api_duration"] = 0.5.into();
    post["ended_at"] = at.into();
    post["usage"] = json!({"input_tokens": input, "output_tokens": output, "cache_read_tokens": 0,
                           "cache_write_tokens": 0, "reasoning_tokens": 0});
    [event("pre_api_request", at, pre), event("post_api_request", at, post)]
}

/// `daily_tokens` beside `daily`: the tokens of calls that cost "$0" reach
/// the token budget's notice, block and LLM stop; the USD budget stays ok;
/// `tokens_counted` applies; a reservation counts its expected tokens.
fn a_calendar_token_budget_counts_what_an_unpriced_model_used() {
    let text = "timezone = \"UTC\"\n[global]\ndaily = 1.0\ndaily_tokens = 25000\n";
    let Scene {
        _dir,
        path,
        mut store,
        mut gate,
        handle,
        t,
    } = scene(text);
    let s = "s-local";
    apply(&mut store, &pre_llm(s, "s:t1", t, "cli", ""));
    for (i, at) in [(0, t + 1.0), (1, t + 2.0)] {
        for e in local_call(s, &format!("l{i}"), at, 10_000, 2_000) {
            apply(&mut store, &e);
        }
    }
    let usd: f64 = store.query_scalar("SELECT SUM(cost_usd) FROM llm_calls").expect("cost");
    assert_eq!(usd, 0.0, "an unpriced model costs $0");
    // 24,000 of 25,000 tokens: past the soft line of the token budget only.
    let t2 = pre_llm(s, "s:t2", t + 3.0, "cli", "");
    apply(&mut store, &t2);
    let notice = context(gate.verdict(&store, &t2)).expect("notice");
    assert!(
        notice.contains("The global daily_tokens budget has 24k tokens used of 25k tokens (96%)"),
        "{notice}"
    );
    assert!(
        !notice.contains("global daily budget"),
        "the USD budget is fine: {notice}"
    );
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c1", t + 4.0)), None);
    // A call in flight reserves its expected tokens: 24,000 + 10,000.
    let [pre, post] = local_call(s, "l2", t + 5.0, 10_000, 2_000);
    apply(&mut store, &pre);
    let message = blocked(gate.verdict(&store, &pre_tool(s, "c2", t + 5.5)));
    assert!(
        message.contains(
            "global daily_tokens budget has 24k tokens used of 25k tokens, and calls in flight reserve 10k tokens more"
        ) && !message.contains("exhausted"),
        "{message}"
    );
    assert!(!message.contains("budget set"), "never how to lift it: {message}");
    apply(&mut store, &post);
    // The next LLM call is stopped before the provider.
    let [pre, _] = local_call(s, "l3", t + 6.0, 10_000, 2_000);
    apply(&mut store, &pre);
    gate.verdict(&store, &pre);
    let stop = handle.stop_for("l3").expect("stopped");
    assert!(stop.contains("daily_tokens"), "{stop}");
    // Counting output only, 6,000 of 25,000: nothing to say.
    std::fs::write(&path, format!("tokens_counted = \"output\"\n{text}")).expect("rewrite");
    gate.reload_if_changed(true);
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c3", t + 7.0)), None);
    // The next day's window starts empty.
    std::fs::write(&path, text).expect("rewrite");
    gate.reload_if_changed(true);
    set_now(t + 86_400.0);
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c4", t + 86_400.0)), None);
}

/// `[downgrade]`: past its line a session's next calls go to the cheaper
/// model (what the `llm_request` middleware asks the handle), the routed
/// call is recorded and priced as that model, and observe mode routes
/// nothing.
fn a_downgrade_routes_the_next_calls_and_prices_them_as_the_cheaper_model() {
    let text = "timezone = \"UTC\"\n[global]\ndaily = 0.1\n[downgrade]\nat = 0.5\nto = \"gpt-4o-mini\"\n\
                [downgrade.models]\n\"claude-opus-4\" = \"claude-haiku-4\"\n";
    let Scene {
        _dir,
        path,
        mut store,
        mut gate,
        handle,
        t,
    } = scene(text);
    let s = "s-down";
    apply(&mut store, &pre_llm(s, "s:t1", t, "cli", ""));
    apply(&mut store, &post_api(s, "a0", t + 1.0, true));
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c0", t + 2.0)), None);
    assert_eq!(
        handle.downgrade_for(s, Some("gpt-4o")),
        None,
        "25% of the limit: below the line"
    );
    apply(&mut store, &post_api(s, "a1", t + 3.0, true));
    assert_eq!(
        gate.verdict(&store, &pre_tool(s, "c1", t + 4.0)),
        None,
        "a downgrade blocks nothing"
    );
    assert_eq!(handle.downgrade_for(s, Some("gpt-4o")).as_deref(), Some("gpt-4o-mini"));
    // Each model to its own provider's cheaper one, as the file maps it.
    assert_eq!(
        handle.downgrade_for(s, Some("claude-opus-4")).as_deref(),
        Some("claude-haiku-4")
    );
    assert_eq!(handle.downgrade_for(s, Some("gpt-4o-mini")), None, "already there");
    assert_eq!(handle.downgrade_for("another-session", Some("gpt-4o")), None);
    // The middleware sent the next call to gpt-4o-mini: pre_api_request's
    // `request` says so, while `model` stays the agent's.
    let routed = event(
        "pre_api_request",
        t + 5.0,
        json!({"session_id": s, "turn_id": "s:t1", "api_request_id": "a2", "model": "gpt-4o", "platform": "cli",
               "approx_input_tokens": 10_000, "max_tokens": 0,
               "request": {"method": "POST", "body": {"model": "gpt-4o-mini", "messages": []}}}),
    );
    apply(&mut store, &routed);
    let mut post = post_api(s, "a2", t + 6.0, true);
    if let hermes_meter_model::hook::Hook::PostApiRequest(p) = &mut post.hook {
        p.response_model = Some("gpt-4o-mini-2024-07-18".into());
    }
    apply(&mut store, &post);
    let row = |column: &str| format!("SELECT {column} FROM llm_calls WHERE api_request_id = 'a2'");
    let model: String = store.query_scalar(&row("model")).expect("model");
    let routed_to: String = store.query_scalar(&row("routed_model")).expect("routed");
    let cost: f64 = store.query_scalar(&row("cost_usd")).expect("cost");
    assert_eq!((model.as_str(), routed_to.as_str()), ("gpt-4o", "gpt-4o-mini"));
    // gpt-4o-mini is $0.15 per million input tokens: 10,000 cost $0.0015.
    assert!((cost - 0.0015).abs() < 1e-9, "{cost}");
    let unrouted: i64 = store
        .query_scalar("SELECT COUNT(*) FROM llm_calls WHERE routed_model IS NULL")
        .expect("count");
    assert_eq!(unrouted, 2);
    let report = store
        .report(&jiff::tz::TimeZone::UTC, t - 60.0, t + 60.0, Some(5))
        .expect("report");
    assert_eq!(report.downgraded.len(), 1, "{:?}", report.downgraded);
    let d = &report.downgraded[0];
    assert_eq!(
        (d.from.as_deref(), d.to.as_str(), d.llm_calls),
        (Some("gpt-4o"), "gpt-4o-mini", 1)
    );
    assert!((d.cost_usd - cost).abs() < 1e-12);
    // Observe mode changes no call.
    std::fs::write(&path, format!("mode = \"observe\"\n{text}")).expect("rewrite");
    gate.reload_if_changed(true);
    let t2 = pre_llm(s, "s:t2", t + 7.0, "cli", "");
    apply(&mut store, &t2);
    gate.verdict(&store, &t2);
    gate.verdict(&store, &pre_tool(s, "c2", t + 8.0));
    assert_eq!(handle.downgrade_for(s, Some("gpt-4o")), None);
}

fn a_subagent_counts_toward_its_roots_cron_job_sender_and_profile() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    store.set_profile(Some("work".into()));
    let t = ts("2026-11-30T12:00:00Z");
    let root = "cron_3f9a1c2b7d10_20261130_120000";
    apply(&mut store, &pre_llm(root, "r:t", t, "cron", "alice"));
    apply(
        &mut store,
        &event(
            "subagent_start",
            t + 1.0,
            json!({"parent_session_id": root, "child_session_id": "child", "parent_turn_id": "r:t"}),
        ),
    );
    apply(&mut store, &post_api(root, "r:api:1", t + 2.0, true));
    apply(&mut store, &post_api("child", "c:api:1", t + 3.0, true));
    let day = (ts("2026-11-30T00:00:00Z") as i64, ts("2026-12-01T00:00:00Z") as i64);
    let spend = |store: &Writer, scope, id: &str| {
        store
            .budget_spend(scope, id, day.0, day.1, t + 10.0, None)
            .expect("spend")
            .settled
    };
    for (scope, id) in [
        (Scope::Global, ""),
        (Scope::CronJob, "3f9a1c2b7d10"),
        (Scope::Sender, "alice"),
        (Scope::Profile, "work"),
        (Scope::Model, "gpt-4o"),
    ] {
        let s = spend(&store, scope, id);
        assert!((s - 2.0 * CALL_USD).abs() < 1e-12, "{scope} {id}: {s}");
    }
    // The same event applied again changes nothing.
    apply(&mut store, &post_api("child", "c:api:1", t + 3.0, true));
    assert!((spend(&store, Scope::Global, "") - 2.0 * CALL_USD).abs() < 1e-12);
    // Outside the window: nothing.
    let before = store
        .budget_spend(Scope::Global, "", day.0 - 86_400, day.0, t, None)
        .expect("spend");
    assert_eq!(before.settled, 0.0);
}

fn gate(dir: &Path) -> BudgetGate {
    BudgetGate::new(dir.join("budgets.toml"), None).with_clock(now)
}

fn soft_notice_once_then_tool_block_until_the_limit_is_raised() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(dir.path(), "timezone = \"UTC\"\n[per_sender.default]\ndaily = 0.09\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    let s = "s-soft";
    apply(&mut store, &pre_llm(s, "t0", t, "telegram", "bob"));
    for n in 0..3 {
        apply(&mut store, &post_api(s, &format!("a{n}"), t + n as f64, true));
    }
    // $0.075 of $0.09: past 80%, a notice once per period.
    let first = context(gate.verdict(&store, &pre_llm(s, "t1", t + 5.0, "telegram", "bob"))).expect("notice");
    assert!(first.contains("sender bob daily"), "{first}");
    assert!(first.contains("$0.08 spent of $0.09"), "{first}");
    assert_eq!(
        context(gate.verdict(&store, &pre_llm(s, "t2", t + 6.0, "telegram", "bob"))),
        None
    );
    assert_eq!(
        gate.verdict(&store, &pre_tool(s, "c1", t + 6.0)),
        None,
        "soft does not block"
    );
    // Another process's gate (another writer) does not repeat it either.
    let mut other = self::gate(dir.path());
    assert_eq!(
        context(other.verdict(&store, &pre_llm(s, "t3", t + 7.0, "telegram", "bob"))),
        None
    );
    apply(&mut store, &post_api(s, "a3", t + 8.0, true));
    // $0.10 of $0.09: hard. Every tool call is blocked; the message says
    // whose limit it is, never how to lift it (the agent reads it).
    for call in ["c2", "c3"] {
        match gate.verdict(&store, &pre_tool(s, call, t + 9.0)) {
            Some(Verdict::Block { message }) => {
                assert!(message.contains("sender bob daily budget is exhausted"), "{message}");
                assert!(
                    message.contains("not yours to change") && !message.contains("budget set"),
                    "{message}"
                );
            }
            other => panic!("expected a block, got {other:?}"),
        }
    }
    // The session is marked stopped: its span is an error with the first
    // block's text and a verdict event, `trace` and the viewer say so.
    let run = store.run_row(s).expect("read").expect("the run");
    let stop = run.budget_stop.clone().expect("marked");
    assert!(stop.contains("sender bob daily budget is exhausted"), "{stop}");
    let span = hermes_meter_model::span::session_span(
        &run,
        0,
        &hermes_meter_model::span::Ancestry::default(),
        Default::default(),
    );
    let status = span.status.expect("a status");
    assert_eq!(status.code, 2, "ERROR");
    assert!(
        status
            .message
            .starts_with("stopped by a hermes-meter budget: BUDGET-EXCEEDED"),
        "{}",
        status.message
    );
    assert_eq!(span.events.len(), 1);
    assert_eq!(span.events[0].name, "hermes.budget.verdict");
    let trace = hermes_meter::trace::load(&store, s, Default::default())
        .expect("trace")
        .expect("the session");
    // Still running (no session end yet): running, with the stop said.
    assert_eq!(trace.root.status, "running");
    assert_eq!(trace.root.detail.as_deref(), Some("stopped by a budget"));
    assert!(
        trace.errors.iter().any(|e| e.error_type == "budget_stop"),
        "{:?}",
        trace.errors
    );
    let hard = context(gate.verdict(&store, &pre_llm(s, "t4", t + 9.0, "telegram", "bob"))).expect("hard notice");
    assert!(hard.contains("is exhausted"), "{hard}");
    // Other senders are not affected.
    apply(&mut store, &pre_llm("s-carol", "tc", t, "telegram", "carol"));
    assert_eq!(gate.verdict(&store, &pre_tool("s-carol", "c1", t + 9.0)), None);
    // Raising the limit in the file lifts the block (hot reload, no restart).
    std::fs::write(
        &path,
        "timezone = \"UTC\"\n[per_sender.default]\ndaily = 0.09\n[per_sender.overrides.bob]\ndaily = 1.0\n",
    )
    .expect("rewrite");
    gate.reload_if_changed(true);
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c4", t + 10.0)), None);
    let counts = store.budget_verdict_counts().expect("counts");
    assert_eq!(
        counts,
        vec![
            ("soft", 1),
            ("hard", 1),
            ("blocked", 2),
            ("paused", 0),
            ("runaway", 0),
            ("waited", 0)
        ]
    );
}

/// One call reporting 10^30 tokens (cut to 10^12 by the decoder) would
/// cost $22 M and exhaust every budget for the day: it is recorded with
/// its figures, held at a cost of 0, and counted as held.
fn a_bogus_usage_figure_is_held_and_blocks_no_budget() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "timezone = \"UTC\"\n[global]\ndaily = 1.0\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    let s = "s-bogus";
    apply(&mut store, &pre_llm(s, "t0", t, "cli", "alice"));
    apply(
        &mut store,
        &event(
            "post_api_request",
            t + 1.0,
            json!({"session_id": s, "turn_id": format!("{s}:t"), "api_request_id": "bogus", "model": "gpt-4o",
                   "platform": "cli", "api_duration": 0.5, "ended_at": t + 1.0,
                   "usage": {"input_tokens": 1e30, "output_tokens": 1e30}}),
        ),
    );
    assert_eq!(
        gate.verdict(&store, &pre_tool(s, "c1", t + 2.0)),
        None,
        "nothing is blocked"
    );
    let q = |sql: &str| store.query_scalar::<f64>(sql).expect(sql);
    assert_eq!(q("SELECT cost_usd FROM llm_calls WHERE api_request_id = 'bogus'"), 0.0);
    assert!(q("SELECT estimate_usd FROM llm_calls WHERE api_request_id = 'bogus'") > 1e6);
    assert!(q("SELECT input_tokens FROM llm_calls WHERE api_request_id = 'bogus'") >= 1e12);
    assert_eq!(q("SELECT COALESCE(SUM(cost_usd), 0) FROM budget_spend"), 0.0);
    assert_eq!(store.held_llm_calls(None).expect("held"), 1);
    let report = store
        .report(&jiff::tz::TimeZone::UTC, t - 60.0, t + 60.0, Some(10))
        .expect("report");
    assert_eq!((report.held_llm_calls, report.totals.cost_usd), (1, 0.0));
    // A real call beside it is charged as usual.
    apply(&mut store, &post_api(s, "real", t + 3.0, true));
    let cost = store.query_scalar::<f64>("SELECT cost_usd FROM runs WHERE session_id = 's-bogus'");
    assert_eq!(cost.expect("run cost"), CALL_USD);
}

/// A held call the user confirms (`hermes-meter held confirm`) is billed
/// from its recorded usage: the run, the spend buckets the gate reads, the
/// report and the cost metric all carry it, once, whether the metric had
/// counted the call (at no cost) before the confirmation or not.
fn a_confirmed_held_call_is_billed_in_its_run_budgets_report_and_metric(folded_first: bool) {
    use hermes_meter_store::Confirmation;
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "timezone = \"UTC\"\n[global]\ndaily = 100.0\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    let s = "s-confirm";
    apply(&mut store, &pre_llm(s, "t0", t, "cli", "alice"));
    // 60 M input tokens of gpt-4o: past the bound, a $150 call if real.
    apply(
        &mut store,
        &event(
            "post_api_request",
            t + 1.0,
            json!({"session_id": s, "turn_id": format!("{s}:t"), "api_request_id": "huge", "model": "gpt-4o",
                   "platform": "cli", "api_duration": 0.5, "ended_at": t + 1.0,
                   "usage": {"input_tokens": 60_000_000, "output_tokens": 10}}),
        ),
    );
    apply(&mut store, &post_api(s, "real", t + 2.0, true));
    let mut measure = |f: &hermes_meter_model::rows::MetricFact, out: &mut Vec<hermes_meter_model::rows::Increment>| {
        hermes_meter_model::metrics::measure(f, out)
    };
    let metric_cost = |store: &Writer| -> f64 {
        let rows = store.metric_series().expect("series");
        rows.iter()
            .filter(|r| r.metric == "gen_ai.usage.cost")
            .map(|r| r.value)
            .sum()
    };
    if folded_first {
        Outbox::open(store.path())
            .expect("outbox")
            .fold_metrics(t + 3.0, t + 3.0, 100, &mut measure)
            .expect("fold");
        assert!((metric_cost(&store) - CALL_USD).abs() < 1e-9, "held at no cost");
    }
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c1", t + 3.0)), None);
    let held = store.held_calls(10).expect("held");
    assert_eq!(held.len(), 1);
    let expected = held[0].estimate_usd.expect("estimate");
    assert!((expected - 150.0).abs() < 0.01, "{expected}");

    assert_eq!(
        store.confirm_held("huge", t + 4.0).expect("confirm"),
        Confirmation::Billed(expected)
    );
    let q = |store: &Writer, sql: &str| store.query_scalar::<f64>(sql).expect(sql);
    let total = expected + CALL_USD;
    assert!((q(&store, "SELECT cost_usd FROM runs WHERE session_id = 's-confirm'") - total).abs() < 1e-9);
    assert_eq!(
        q(&store, "SELECT COUNT(*) FROM llm_calls WHERE cost_source = 'held'"),
        0.0
    );
    assert_eq!(
        q(
            &store,
            "SELECT cost_source = 'builtin' FROM llm_calls WHERE api_request_id = 'huge'"
        ),
        1.0
    );
    // Every bucket level of the global scope holds it, and the calls stay two.
    assert!(
        (q(
            &store,
            "SELECT cost_usd FROM budget_spend WHERE scope = 'global' AND level = 0"
        ) - total)
            .abs()
            < 1e-9
    );
    assert_eq!(
        q(
            &store,
            "SELECT calls FROM budget_spend WHERE scope = 'global' AND level = 0"
        ),
        2.0
    );
    assert!(
        matches!(
            gate.verdict(&store, &pre_tool(s, "c2", t + 5.0)),
            Some(Verdict::Block { .. })
        ),
        "the confirmed spend is over the daily $100"
    );
    let report = store
        .report(&jiff::tz::TimeZone::UTC, t - 60.0, t + 60.0, Some(10))
        .expect("report");
    assert_eq!(report.held_llm_calls, 0);
    assert!((report.totals.cost_usd - total).abs() < 1e-9);
    Outbox::open(store.path())
        .expect("outbox")
        .fold_metrics(t + 6.0, t + 6.0, 100, &mut measure)
        .expect("fold");
    assert!((metric_cost(&store) - total).abs() < 1e-9, "{}", metric_cost(&store));
    // Once only.
    assert_eq!(
        store.confirm_held("huge", t + 7.0).expect("again"),
        Confirmation::NotHeld
    );
    assert_eq!(
        store.confirm_held("nope", t + 7.0).expect("unknown"),
        Confirmation::Unknown
    );
    assert!((q(&store, "SELECT cost_usd FROM runs WHERE session_id = 's-confirm'") - total).abs() < 1e-9);
}

fn the_window_rolls_over_at_local_midnight_in_a_non_utc_zone() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "timezone = \"Asia/Kolkata\"\n[global]\ndaily = 0.05\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    // 23:50 in Kolkata (+05:30) is 18:20 UTC.
    let before = ts("2026-11-30T18:20:00Z");
    set_now(before);
    let s = "s-roll";
    apply(&mut store, &pre_llm(s, "t0", before, "cli", ""));
    apply(&mut store, &post_api(s, "a0", before, true));
    apply(&mut store, &post_api(s, "a1", before + 60.0, true));
    assert!(matches!(
        gate.verdict(&store, &pre_tool(s, "c0", before + 120.0)),
        Some(Verdict::Block { .. })
    ));
    // 00:00 in Kolkata is 18:30 UTC: a new day, nothing spent in it.
    set_now(ts("2026-11-30T18:30:00Z"));
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c1", now())), None);
    // One second before local midnight the block still holds.
    set_now(ts("2026-11-30T18:29:59Z"));
    assert!(gate.verdict(&store, &pre_tool(s, "c2", now())).is_some());
}

/// A rolling window (`1h`) blocks once exhausted, says when calls go
/// again, and lets them go at that quarter hour, whatever the calendar.
fn a_rolling_budget_blocks_until_enough_of_its_spend_leaves_the_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "timezone = \"UTC\"\n[global]\ndaily = 10\n1h = 0.06\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let t = ts("2026-12-01T23:40:00Z");
    set_now(t);
    let s = "s-rolling";
    apply(&mut store, &pre_llm(s, "t0", t, "cli", ""));
    // $0.025 at 23:40 and 23:50, $0.025 at 00:10: $0.075 in the last hour
    // across midnight (the day has $0.025 of it).
    apply(&mut store, &post_api(s, "a0", t, true));
    apply(&mut store, &post_api(s, "a1", t + 600.0, true));
    set_now(ts("2026-12-02T00:10:00Z"));
    apply(&mut store, &post_api(s, "a2", now(), true));
    match gate.verdict(&store, &pre_tool(s, "c0", now() + 1.0)) {
        Some(Verdict::Block { message }) => {
            assert!(
                message.contains("global 1h budget is exhausted ($0.08 spent of $0.06)"),
                "{message}"
            );
            // 23:30's quarter ($0.025) leaves at 00:45: $0.05 < $0.06.
            assert!(message.contains("Calls go again at 2026-12-02 00:45 UTC"), "{message}");
            assert!(message.contains("frees $0.03 at 2026-12-02 00:45 UTC"), "{message}");
            assert!(!message.contains("budget set"), "{message}");
        }
        other => panic!("expected a block, got {other:?}"),
    }
    set_now(ts("2026-12-02T00:44:59Z"));
    assert!(gate.verdict(&store, &pre_tool(s, "c1", now())).is_some(), "not yet");
    set_now(ts("2026-12-02T00:45:00Z"));
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c2", now())), None);
    let states = store.budget_states(gate.config(), now()).expect("states");
    let hour = states.iter().find(|s| s.budget.key() == "1h").expect("1h");
    assert!((hour.spend.total() - 0.05).abs() < 1e-9, "{hour:?}");
    let frees = hour.frees.expect("frees");
    assert_eq!(
        frees.at as f64,
        ts("2026-12-02T01:00:00Z"),
        "23:50 is in 23:45's quarter: it leaves at 01:00"
    );
}

/// A request as the bridge shows it to the gate: applied, observed, then
/// its verdict. Returns its stop text and its wait.
fn request(
    store: &mut Writer,
    gate: &mut BudgetGate,
    session: &str,
    id: &str,
    at: f64,
) -> (Option<String>, Option<f64>) {
    let e = pre_api(session, id, at);
    apply(store, &e);
    gate.observe(store, &e);
    assert_eq!(gate.verdict(store, &e), None, "pre_api_request returns nothing");
    let handle = gate.handle();
    (handle.stop_for(id), handle.wait_for(id))
}

/// `requests_per_minute = 2`: the third request in a minute is stopped
/// (the provider is not called) and says when calls fit again; with
/// `action = "wait"`, calls past the limit wait until they fit and queue
/// behind each other, and one that would wait past `max_wait_seconds`
/// stops. No minute ever holds more than two requests that went.
fn a_rate_limit_stops_the_call_past_it_or_holds_it_back_until_it_fits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(dir.path(), "timezone = \"UTC\"\n[global]\nrequests_per_minute = 2\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let t = ts("2026-12-01T10:00:00Z");
    set_now(t);
    let s = "s-rate";
    apply(&mut store, &pre_llm(s, "t0", t, "cli", ""));
    let mut went = Vec::new();
    for (n, at) in [(0, t), (1, t + 1.0)] {
        set_now(at);
        let id = format!("r{n}");
        assert_eq!(request(&mut store, &mut gate, s, &id, at), (None, None), "{id}");
        let end = post_api(s, &id, at + 0.5, true);
        apply(&mut store, &end);
        gate.observe(&store, &end);
        went.push(at);
    }
    set_now(t + 10.0);
    let (stop, wait) = request(&mut store, &mut gate, s, "r2", t + 10.0);
    let stop = stop.expect("the third request in a minute is stopped");
    assert_eq!(wait, None);
    assert!(
        stop.contains("the global rate limit of 2 requests per minute is reached (2 requests in the last minute)"),
        "{stop}"
    );
    // Both went in 10:00:00's step: they leave the minute at 10:01:05.
    assert!(stop.contains("Calls fit again at 2026-12-01 10:01 UTC"), "{stop}");
    assert!(
        stop.contains("not yours to change") && !stop.contains("budget set"),
        "{stop}"
    );
    // Stopped, it counts nowhere: a request at 10:01:05 goes.
    set_now(t + 65.0);
    assert_eq!(request(&mut store, &mut gate, s, "r3", t + 65.0), (None, None));
    went.push(t + 65.0);
    // Waiting instead of stopping.
    std::fs::write(
        &path,
        "timezone = \"UTC\"\n[global]\nrequests_per_minute = 2\n[rate_limit]\naction = \"wait\"\n",
    )
    .expect("rewrite");
    gate.reload_if_changed(true);
    set_now(t + 66.0);
    let (stop, wait) = request(&mut store, &mut gate, s, "r4", t + 66.0);
    assert_eq!((stop, wait), (None, None), "one went in this minute: it fits");
    went.push(t + 66.0);
    set_now(t + 70.0);
    let (stop, wait) = request(&mut store, &mut gate, s, "r5", t + 70.0);
    assert_eq!(stop, None);
    // 10:01:05's step leaves at 10:02:10: a wait of 60 s.
    assert_eq!(wait, Some(60.0));
    went.push(t + 130.0);
    set_now(t + 71.0);
    let (stop, wait) = request(&mut store, &mut gate, s, "r6", t + 71.0);
    assert_eq!(stop, None);
    assert_eq!(wait, Some(59.0), "it queues behind r5, not before it");
    went.push(t + 130.0);
    set_now(t + 72.0);
    let (stop, wait) = request(&mut store, &mut gate, s, "r7", t + 72.0);
    assert!(
        stop.is_some() && wait.is_none(),
        "a wait past 60 s stops: {stop:?} {wait:?}"
    );
    // No minute held more than two requests that went.
    let most = went
        .iter()
        .map(|a| went.iter().filter(|b| **b <= *a && **b > *a - 60.0).count())
        .max();
    assert_eq!(most, Some(2), "{went:?}");
    let counts = store.budget_verdict_counts().expect("counts");
    assert!(
        counts.contains(&("waited", 2)) && counts.contains(&("blocked", 2)),
        "{counts:?}"
    );
}

fn observe_mode_notices_but_never_blocks() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(
        dir.path(),
        "mode = \"observe\"\ntimezone = \"UTC\"\n[global]\ndaily = 0.01\n",
    );
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    apply(&mut store, &pre_llm("s-obs", "t0", t, "cli", ""));
    apply(&mut store, &post_api("s-obs", "a0", t, true));
    assert_eq!(gate.verdict(&store, &pre_tool("s-obs", "c0", t)), None);
    apply(&mut store, &pre_api("s-obs", "a1", t + 1.0));
    assert_eq!(gate.verdict(&store, &pre_api("s-obs", "a1", t + 1.0)), None);
    assert_eq!(gate.handle().stop_for("a1"), None);
    let text = context(gate.verdict(&store, &pre_llm("s-obs", "t1", t + 2.0, "cli", ""))).expect("notice");
    assert!(text.contains("observe mode"), "{text}");
    // The environment's mode wins over the file's.
    let mut enforced = BudgetGate::new(
        dir.path().join("budgets.toml"),
        Some(hermes_meter_model::budget::BudgetMode::Enforce),
    )
    .with_clock(now);
    assert!(enforced.verdict(&store, &pre_tool("s-obs", "c1", t)).is_some());
}

fn estimated_costs_are_flagged_and_can_soften_a_hard_verdict() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(dir.path(), "timezone = \"UTC\"\n[global]\ndaily = 0.03\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    let s = "s-est";
    apply(&mut store, &pre_llm(s, "t0", t, "cli", ""));
    apply(&mut store, &post_api(s, "a0", t, true));
    // No usage: estimated from pre_api_request's approx_input_tokens.
    apply(&mut store, &pre_api(s, "a1", t + 1.0));
    apply(&mut store, &post_api(s, "a1", t + 2.0, false));
    let day = (ts("2026-11-30T00:00:00Z") as i64, ts("2026-12-01T00:00:00Z") as i64);
    let spend = store
        .budget_spend(Scope::Global, "", day.0, day.1, t + 3.0, None)
        .expect("spend");
    assert!((spend.settled - 2.0 * CALL_USD).abs() < 1e-12, "{spend:?}");
    assert!((spend.estimated - CALL_USD).abs() < 1e-12, "{spend:?}");
    assert_eq!(spend.reserved, 0.0, "settled at post_api_request");
    assert!(gate.verdict(&store, &pre_tool(s, "c0", t + 3.0)).is_some(), "hard");
    std::fs::write(
        &path,
        "timezone = \"UTC\"\nsoften_estimated = true\n[global]\ndaily = 0.03\n",
    )
    .expect("rewrite");
    gate.reload_if_changed(true);
    assert_eq!(gate.verdict(&store, &pre_tool(s, "c1", t + 3.0)), None, "softened");
    let states = store.budget_states(gate.config(), t + 3.0).expect("states");
    assert!(states[0].softened, "{states:?}");
}

fn a_stopped_llm_call_and_a_paused_cron_job() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "timezone = \"UTC\"\n[per_cron_job.default]\ndaily = 0.02\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = gate(dir.path());
    let handle = gate.handle();
    let t = ts("2026-11-30T12:00:00Z");
    set_now(t);
    let s = "cron_0123456789ab_20261130_120000";
    apply(&mut store, &pre_llm(s, "t0", t, "cron", ""));
    apply(&mut store, &pre_api(s, "a0", t));
    // Its own reservation does not stop the first call.
    assert_eq!(gate.verdict(&store, &pre_api(s, "a0", t)), None);
    assert_eq!(handle.stop_for("a0"), None);
    apply(&mut store, &post_api(s, "a0", t + 1.0, true));
    apply(&mut store, &pre_api(s, "a1", t + 2.0));
    gate.verdict(&store, &pre_api(s, "a1", t + 2.0));
    let text = handle.stop_for("a1").expect("stopped");
    assert!(text.starts_with("BUDGET-EXCEEDED"), "{text}");
    assert_eq!(
        handle.stop_for("a1").as_deref(),
        Some(text.as_str()),
        "a retry of it is stopped too"
    );
    assert_eq!(
        store.reserved_now().expect("reserved"),
        0.0,
        "a stopped call spends nothing and holds no reservation for other processes"
    );
    let pauses = handle.take_pauses();
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].job_id, "0123456789ab");
    // The stand-in response is no LLM call and costs nothing.
    let mut blocked = post_api(s, "a1", t + 3.0, false);
    if let hermes_meter_model::hook::Hook::PostApiRequest(p) = &mut blocked.hook {
        p.response_model = Some(BLOCKED_MODEL.into());
    }
    apply(&mut store, &blocked);
    let calls: i64 = store.query_scalar("SELECT COUNT(*) FROM llm_calls").expect("count");
    assert_eq!(calls, 1);
    // Paused once per window, whichever gating hook sees the breach next.
    gate.verdict(&store, &pre_tool(s, "c0", t + 4.0));
    gate.verdict(&store, &pre_llm(s, "t1", t + 4.0, "cron", ""));
    assert!(handle.take_pauses().is_empty());
    // The next day it would pause again.
    set_now(t + 86_400.0);
    let s2 = "cron_0123456789ab_20261201_120000";
    apply(&mut store, &pre_llm(s2, "t0", t + 86_400.0, "cron", ""));
    apply(&mut store, &post_api(s2, "b0", t + 86_400.0, true));
    apply(&mut store, &post_api(s2, "b1", t + 86_401.0, true));
    gate.verdict(&store, &pre_tool(s2, "c0", t + 86_402.0));
    assert_eq!(handle.take_pauses().len(), 1);
}

#[test]
fn free_to_paid_and_unavailable_models_are_one_shot_alerts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = BudgetGate::new(dir.path().join("budgets.toml"), None);
    let t = hermes_meter_store::unix_now();
    let call = |model: &str, id: &str, at: f64| {
        event(
            "post_api_request",
            at,
            json!({"session_id": "s", "api_request_id": id, "model": model, "ended_at": at,
                   "usage": {"input_tokens": 1000, "output_tokens": 10}}),
        )
    };
    apply(&mut store, &call("gpt-4o:free", "f0", t));
    assert_eq!(context(gate.verdict(&store, &pre_llm("s", "t0", t, "cli", ""))), None);
    apply(&mut store, &call("gpt-4o", "p0", t + 1.0));
    let text = context(gate.verdict(&store, &pre_llm("s", "t1", t + 2.0, "cli", ""))).expect("alert");
    assert!(text.contains("Model gpt-4o was free"), "{text}");
    apply(&mut store, &call("gpt-4o", "p1", t + 3.0));
    assert_eq!(
        context(gate.verdict(&store, &pre_llm("s", "t2", t + 4.0, "cli", ""))),
        None
    );
    // A model only ever seen paid never alerts.
    apply(&mut store, &call("gpt-4o-mini", "m0", t + 5.0));
    assert_eq!(
        context(gate.verdict(&store, &pre_llm("s", "t3", t + 6.0, "cli", ""))),
        None
    );
    // The recorded 404 (not retryable) of Hermes 0.19.0, twice.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/model404.jsonl");
    let mut stats = hermes_meter_store::replay::ReplayStats::default();
    hermes_meter_store::replay::replay_file(&mut store, &fixture, DecodeOptions::default(), &mut stats)
        .expect("replay");
    let e = event(
        "api_request_error",
        t + 7.0,
        json!({"session_id": "s", "api_request_id": "x", "model": "gone-model", "status_code": 404,
               "retryable": false, "retry_count": 0}),
    );
    apply(&mut store, &e);
    let e2 = event(
        "api_request_error",
        t + 8.0,
        json!({"session_id": "s", "api_request_id": "y", "model": "gone-model", "status_code": 404,
               "retryable": false, "retry_count": 0}),
    );
    apply(&mut store, &e2);
    let text = context(gate.verdict(&store, &pre_llm("s", "t4", t + 9.0, "cli", ""))).expect("alert");
    assert!(text.contains("gone-model is unavailable"), "{text}");
    assert!(text.contains("Seen 2 times"), "{text}");
    let counts = store.alert_counts().expect("counts");
    assert_eq!(counts[0], ("free_to_paid", 1));
    assert!(counts[1].1 >= 2, "the fixture's model and gone-model: {counts:?}");
}

/// Calls each child process makes at most.
const CHILD_CALLS: usize = 200;
const CHILD_ENV: &str = "HERMES_METER_BUDGET_TEST_CHILD";

/// Two OS processes spend against one global limit at once, each through
/// its own bridge and gate: the overshoot is at most one call per process
/// in flight. A call is stopped when the spend plus the other process's
/// call in flight reaches the limit, and that call may be stopped in turn:
/// the spend then ends at most that one call under the limit.
#[test]
fn two_processes_spending_at_once_overshoot_by_at_most_the_calls_in_flight() {
    let limit = 1.0;
    let (_dir, store) = two_processes_spend(&format!("[global]\ndaily = {limit}\n"));
    let spent: f64 = store.query_scalar("SELECT SUM(cost_usd) FROM llm_calls").expect("sum");
    assert!(spent >= limit - CALL_USD - 1e-9, "{spent}");
    assert!(
        spent <= limit + 2.0 * CALL_USD + 1e-9,
        "overshoot beyond the calls in flight: {spent}"
    );
}

/// The same with a limit in tokens: each call in flight reserves its
/// tokens, so the overshoot is again at most one call per process.
#[test]
fn two_processes_spending_tokens_at_once_overshoot_by_at_most_the_calls_in_flight() {
    let (limit, call_tokens) = (400_000.0, 10_000.0);
    let (_dir, store) = two_processes_spend(&format!("[global]\ndaily_tokens = {limit}\n"));
    let spent: f64 = store
        .query_scalar("SELECT SUM(input_tokens + output_tokens) FROM llm_calls")
        .expect("sum");
    assert!(spent >= limit - call_tokens, "{spent}");
    assert!(
        spent <= limit + 2.0 * call_tokens,
        "overshoot beyond the calls in flight: {spent}"
    );
}

/// The same in a rolling window: its spend is read from the buckets,
/// beside the calls in flight, as a calendar window's is.
#[test]
fn two_processes_spending_at_once_in_a_rolling_window_overshoot_by_at_most_the_calls_in_flight() {
    let limit = 1.0;
    let (_dir, store) = two_processes_spend(&format!("[global]\n5h = {limit}\n"));
    let spent: f64 = store.query_scalar("SELECT SUM(cost_usd) FROM llm_calls").expect("sum");
    assert!(spent >= limit - CALL_USD - 1e-9, "{spent}");
    assert!(
        spent <= limit + 2.0 * CALL_USD + 1e-9,
        "overshoot beyond the calls in flight: {spent}"
    );
}

/// Two child processes ([`budget_child_process`]) spend at once under
/// `budgets` (UTC) until each is stopped; the store they wrote.
fn two_processes_spend(budgets: &str) -> (tempfile::TempDir, Writer) {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), &format!("timezone = \"UTC\"\n{budgets}"));
    // Created and migrated before the children race to open it.
    drop(Writer::open_dir(dir.path()).expect("create the store"));
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    &hermes_meter_test_support::test_name(module_path!(), "budget_child_process"),
                ])
                .args(["--nocapture", "--test-threads", "1"])
                .env(CHILD_ENV, dir.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut stopped = 0;
    for child in children {
        let out = child.wait_with_output().expect("child");
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.find("CHILD ").map(|i| &l[i + 6..]))
            .expect("child summary");
        let parts: Vec<usize> = line.split_whitespace().map(|n| n.parse().expect("number")).collect();
        assert!(parts[0] > 0, "each child made calls: {line}");
        stopped += parts[1];
    }
    assert_eq!(stopped, 2, "both children were stopped by the limit");
    let store = Writer::open_dir(dir.path()).expect("open");
    (dir, store)
}

/// The child of the test above (does nothing unless started by it).
#[test]
fn budget_child_process() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else { return };
    let dir = PathBuf::from(dir);
    let mut cfg = BridgeConfig::new(dir.clone());
    cfg.hook_wait = Duration::from_secs(10);
    let gate = BudgetGate::new(dir.join("budgets.toml"), None);
    let handle = gate.handle();
    let bridge = Bridge::start_with_gate(cfg, Box::new(gate));
    let pid = std::process::id();
    let session = format!("p{pid}");
    let (mut made, mut stopped) = (0, 0);
    for n in 0..CHILD_CALLS {
        let id = format!("{session}:api:{n}");
        let at = hermes_meter_store::unix_now();
        let outcome = bridge.submit(pre_api(&session, &id, at), EventContext::default());
        assert!(matches!(outcome, Outcome::Committed(None)), "{outcome:?}");
        if handle.stop_for(&id).is_some() {
            stopped += 1;
            break;
        }
        // The provider call takes a moment, so the two processes overlap.
        std::thread::sleep(Duration::from_millis(2));
        bridge.submit(
            post_api(&session, &id, hermes_meter_store::unix_now(), true),
            EventContext::default(),
        );
        made += 1;
    }
    assert!(bridge.flush(Duration::from_secs(10)));
    println!("CHILD {made} {stopped}");
}

/// The gate's one-statement read equals the plain bounded sum, for every
/// window in a zone with a 45-minute offset.
#[test]
fn the_gates_read_equals_the_window_sum() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let now = ts("2026-11-18T09:07:00Z");
    apply(&mut store, &pre_llm("s-sum", "t0", now - 40.0 * 86_400.0, "cli", ""));
    // A call every 7 hours 13 minutes over the 40 days before now.
    // The zone's per-period totals are registered half way: filled from
    // the buckets, then kept up by every call.
    let mut at = now - 40.0 * 86_400.0;
    let mut n = 0;
    while at < now {
        if n == 70 {
            assert!(store.ensure_budget_zone("Asia/Kathmandu", at).expect("zone"));
        }
        apply(&mut store, &post_api("s-sum", &format!("a{n}"), at, n % 3 != 0));
        at += 7.0 * 3600.0 + 13.0 * 60.0;
        n += 1;
    }
    assert!(n > 100);
    let tz = jiff::tz::TimeZone::get("Asia/Kathmandu").expect("zone");
    let t = jiff::Timestamp::from_second(now as i64).expect("ts");
    let windows: Vec<(i64, i64)> = hermes_meter_model::budget::Window::CALENDAR
        .iter()
        .map(|w| {
            let (s, e) = hermes_meter_model::budget::window_bounds(*w, t, &tz);
            (s.as_second(), e.as_second())
        })
        .collect();
    let starts: Vec<i64> = windows.iter().map(|w| w.0).collect();
    let fast = store
        .bucket_window_spends(Scope::Global, "", &starts, now, None)
        .expect("fast");
    for ((s, e), f) in windows.iter().zip(&fast) {
        let plain = store.budget_spend(Scope::Global, "", *s, *e, now, None).expect("plain");
        assert!((plain.settled - f.usd.settled).abs() < 1e-12, "{plain:?} {f:?}");
        assert!((plain.estimated - f.usd.estimated).abs() < 1e-12, "{plain:?} {f:?}");
        assert!(f.usd.settled > 0.0 && f.input_tokens.settled > 0.0);
    }
    assert!(fast[0].usd.settled < fast[1].usd.settled && fast[1].usd.settled < fast[2].usd.settled);
    let periods: Vec<(hermes_meter_model::budget::Window, i64)> = hermes_meter_model::budget::Window::CALENDAR
        .iter()
        .copied()
        .zip(starts.iter().copied())
        .collect();
    let by_period = store
        .period_spends(Scope::Global, "", "Asia/Kathmandu", &periods, now, None)
        .expect("periods");
    for (f, p) in fast.iter().zip(&by_period) {
        assert!((f.usd.settled - p.usd.settled).abs() < 1e-12, "{f:?} {p:?}");
        assert!((f.usd.estimated - p.usd.estimated).abs() < 1e-12, "{f:?} {p:?}");
        // Token sums are whole numbers: exactly equal.
        assert_eq!(f.input_tokens, p.input_tokens);
        assert_eq!(f.output_tokens, p.output_tokens);
    }
}

/// A budget file with a typo from the start holds every tool and LLM call
/// (enforce mode): the limits the operator wrote cannot be checked, and
/// the log says no limit is in force. Fixed, the calls go again; in
/// observe mode nothing is held.
#[test]
fn a_budget_file_that_never_parsed_holds_every_call_until_it_is_fixed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(dir.path(), "[global]\ndaily = 0.5O\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = BudgetGate::new(path.clone(), None);
    let handle = gate.handle();
    let logged = handle.take_messages();
    assert!(
        logged.len() == 1 && logged[0].contains("NO limit is in force") && !logged[0].contains("previous limits kept"),
        "{logged:?}"
    );
    let t = hermes_meter_store::unix_now();
    apply(&mut store, &pre_llm("s-typo", "t0", t, "cli", ""));
    let text = blocked(gate.verdict(&store, &pre_tool("s-typo", "c0", t)));
    assert!(text.contains("budget file does not parse"), "{text}");
    assert!(
        !text.contains("daily") && !text.contains("budget set"),
        "nothing on how to lift it: {text}"
    );
    apply(&mut store, &pre_api("s-typo", "a0", t));
    gate.verdict(&store, &pre_api("s-typo", "a0", t));
    assert!(handle.stop_for("a0").is_some(), "the LLM call is held too");
    assert_eq!(store.reserved_now().expect("reserved"), 0.0);
    // Fixed: the limits are in force and the calls go.
    std::fs::write(&path, "[global]\ndaily = 0.5\n").expect("fix");
    gate.reload_if_changed(true);
    assert_eq!(gate.verdict(&store, &pre_tool("s-typo", "c1", t)), None);
    // Broken again: the limits loaded are kept, and said so.
    std::fs::write(&path, "[global]\ndaily = \"half\"\n").expect("break");
    gate.reload_if_changed(true);
    assert!(handle
        .take_messages()
        .iter()
        .any(|m| m.contains("previous limits kept")));
    assert_eq!(gate.verdict(&store, &pre_tool("s-typo", "c2", t)), None);
    // Observe mode holds nothing, and says no limit is in force.
    let observed = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(observed.path(), "mode = \"observe\"\n[global]\ndaily = 0.5O\n");
    let mut gate = BudgetGate::new(path, Some(hermes_meter_model::budget::BudgetMode::Observe));
    assert!(gate.handle().take_messages()[0].contains("observe mode: nothing is held"));
    assert_eq!(gate.verdict(&store, &pre_tool("s-typo", "c3", t)), None);
}

/// A budget file every user can write is logged by the process that
/// loads it: anyone can lift those limits.
#[test]
fn a_world_writable_budget_file_is_logged_when_loaded() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(dir.path(), "[global]\ndaily = 0.5\n");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let gate = BudgetGate::new(path, None);
    let logged = gate.handle().take_messages();
    assert!(
        logged
            .iter()
            .any(|m| m.starts_with("the limits are not safe:") && m.contains("writable by every user")),
        "{logged:?}"
    );
}

/// A running gate picks up an edited budget file by itself (it looks at the
/// file's modification time at most once a second), without a restart.
#[test]
fn an_edited_budget_file_is_picked_up_without_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_budgets(dir.path(), "[global]\ndaily = 1000\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = BudgetGate::new(path.clone(), None);
    let t = hermes_meter_store::unix_now();
    apply(&mut store, &pre_llm("s-hot", "t0", t, "cli", ""));
    apply(&mut store, &post_api("s-hot", "a0", t, true));
    assert_eq!(gate.verdict(&store, &pre_tool("s-hot", "c0", t)), None);
    // The CLI lowers the limit below what was spent.
    let home = dir.path().to_string_lossy().into_owned();
    let code = hermes_meter::cli::run([
        "hermes-meter",
        "--home",
        &home,
        "budget",
        "set",
        "global",
        "daily",
        "0.01",
    ]);
    assert_eq!(code, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    loop {
        n += 1;
        if gate.verdict(&store, &pre_tool("s-hot", &format!("c{n}"), t)).is_some() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the edit was not picked up");
        std::thread::yield_now();
    }
    // A broken edit keeps the limits in force and is reported.
    std::fs::write(&path, "[global]\ndaily = \"lots\"\n").expect("break");
    gate.reload_if_changed(true);
    assert!(gate.verdict(&store, &pre_tool("s-hot", "cx", t)).is_some());
    assert!(gate.handle().take_messages()[0].contains("previous limits kept"));
    // list and forecast read it all back.
    std::fs::write(&path, "[global]\ndaily = 0.01\n").expect("fix");
    for cmd in ["list", "forecast"] {
        assert_eq!(
            hermes_meter::cli::run(["hermes-meter", "--home", &home, "budget", cmd, "--json"]),
            0
        );
    }
    let gauges = hermes_meter_runtime::budget::budget_gauges(&store, dir.path(), false, false, t).expect("gauges");
    assert_eq!(gauges.len(), 1);
    assert_eq!(
        (gauges[0].scope, gauges[0].window, gauges[0].limit),
        ("global", "daily", 0.01)
    );
    assert!((gauges[0].spend - CALL_USD).abs() < 1e-12);
    // Spent now, in a window that has hours left: projected past the spend.
    assert!(gauges[0].projected >= gauges[0].spend, "{:?}", gauges[0]);
}

/// Per-sender budgets (the README's example) put no gateway user id into
/// metrics unless `sender` is in the metric attribute allow list: their
/// gauges are one series per window and unit, id `*`, of the sender
/// nearest its line.
#[test]
fn sender_budgets_keep_user_ids_out_of_the_gauges_by_default() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(
        dir.path(),
        "timezone = \"UTC\"\n[per_sender.default]\ndaily = 1.0\n[per_sender.overrides.\"vip-7\"]\ndaily = 5.0\n",
    );
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let t = hermes_meter_store::unix_now();
    for (sender, calls) in [("alice-1", 1), ("bob-2", 2), ("vip-7", 3)] {
        let session = format!("s-{sender}");
        apply(
            &mut store,
            &pre_llm(&session, &format!("{session}:t"), t, "telegram", sender),
        );
        for n in 0..calls {
            apply(&mut store, &post_api(&session, &format!("{sender}-{n}"), t, true));
        }
    }
    let gauges = hermes_meter_runtime::budget::budget_gauges(&store, dir.path(), false, false, t).expect("gauges");
    let senders: Vec<_> = gauges.iter().filter(|g| g.scope == "sender").collect();
    let all = hermes_meter_runtime::budget::budget_gauges(&store, dir.path(), false, true, t).expect("gauges");
    assert_eq!(senders.len(), 1, "{gauges:?} {all:?}");
    assert_eq!(senders[0].id, hermes_meter_model::budget::ANY_SENDER);
    // bob: 2 calls of a $1 line is nearer than vip's 3 of $5.
    assert!(
        (senders[0].spend - 2.0 * CALL_USD).abs() < 1e-12 && senders[0].limit == 1.0,
        "{:?} {all:?}",
        senders[0]
    );
    let named = hermes_meter_runtime::budget::budget_gauges(&store, dir.path(), false, true, t).expect("gauges");
    let mut ids: Vec<_> = named
        .iter()
        .filter(|g| g.scope == "sender")
        .map(|g| g.id.as_str())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["alice-1", "bob-2", "vip-7"],
        "with `sender` allowed each is its own series"
    );
}

/// A process's bridge with the budget gate of the store in `dir`, hooks
/// waiting up to 10 s for their verdict, and the gate's handle.
fn gated_bridge(dir: &Path) -> (Bridge, hermes_meter_runtime::budget::BudgetHandle) {
    let mut cfg = BridgeConfig::new(dir.to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let gate = BudgetGate::for_store_dir(dir, None, false);
    let handle = gate.handle();
    (Bridge::start_with_gate(cfg, Box::new(gate)), handle)
}

/// Waits for a new process's first refresh: another session's verdicts
/// leave its quick view measured.
fn warm_up(bridge: &Bridge) {
    let fresh = json!({"session_id": "warm", "tool_call_id": "w1", "tool_name": "terminal"});
    eventually("the first refresh", || {
        matches!(
            spooled(bridge, "pre_tool_call", fresh.clone()),
            Outcome::Committed(None) | Outcome::Queued
        )
    });
}

/// A hook call the way the binding makes it: spool record, then submit.
fn spooled(bridge: &Bridge, hook: &str, kwargs: Value) -> Outcome {
    hooks::call(bridge, hook, kwargs).0
}

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(std::time::Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn gating_hooks_wait_only_while_the_gate_has_something_to_say() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = BridgeConfig::new(dir.path().to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let bridge = Bridge::start_with_gate(cfg, Box::new(BudgetGate::for_store_dir(dir.path(), None, false)));
    let llm = |turn: &str| json!({"session_id": "w", "turn_id": turn, "model": "gpt-4o"});
    let tool = json!({"session_id": "w", "tool_call_id": "c", "tool_name": "terminal"});
    // No budget, no alert: nothing to wait for.
    eventually("the first refresh", || {
        spooled(&bridge, "pre_llm_call", llm("w:0")) == Outcome::Queued
    });
    assert_eq!(spooled(&bridge, "pre_tool_call", tool.clone()), Outcome::Queued);
    // Nothing waits: the binding leaves every call to the writer to decode.
    assert!(hermes_meter_model::hook::HOOK_NAMES
        .iter()
        .all(|h| bridge.decodes_later(h)));
    // A 404 that is not retryable raises an alert: the next pre_llm_call
    // after its commit waits, and shows it.
    let e404 = json!({"session_id": "w", "api_request_id": "x", "model": "gone-model", "status_code": 404,
                      "retryable": false, "retry_count": 0});
    assert_eq!(spooled(&bridge, "api_request_error", e404), Outcome::Queued);
    assert!(bridge.flush(Duration::from_secs(10)));
    let text = match spooled(&bridge, "pre_llm_call", llm("w:1")) {
        Outcome::Committed(v) => context(v).expect("the alert"),
        other => panic!("expected a verdict, got {other:?}"),
    };
    assert!(text.contains("gone-model is unavailable"), "{text}");
    // Shown once; then the hook stops waiting again.
    assert!(bridge.flush(Duration::from_secs(10)));
    assert_eq!(spooled(&bridge, "pre_llm_call", llm("w:2")), Outcome::Queued);
    // A budget in enforce mode, already spent (a call cost more than its
    // whole limit; a limit must be above 0): the gating hooks wait for
    // their verdicts, which stop the calls.
    let spend = json!({"session_id": "w", "turn_id": "w:0", "api_request_id": "w:0:api:1", "model": "gpt-4o",
                       "api_duration": 0.01, "usage": {"input_tokens": 1000, "output_tokens": 100}});
    spooled(&bridge, "post_api_request", spend);
    assert!(bridge.flush(Duration::from_secs(10)));
    write_budgets(dir.path(), "[global]\ndaily = 0.0001\n");
    eventually("the budget file reload", || {
        matches!(
            spooled(&bridge, "pre_tool_call", tool.clone()),
            Outcome::Committed(Some(Verdict::Block { .. }))
        )
    });
    let text = match spooled(&bridge, "pre_llm_call", llm("w:3")) {
        Outcome::Committed(v) => context(v).expect("the hard notice"),
        other => panic!("expected a verdict, got {other:?}"),
    };
    assert!(text.contains("global daily"), "{text}");
    // Calls that may carry spend or wait for a verdict are now decoded on
    // the hook thread; the others still go to the writer undecoded.
    let decoded_here: Vec<&str> = hermes_meter_model::hook::HOOK_NAMES
        .into_iter()
        .filter(|h| !bridge.decodes_later(h))
        .collect();
    assert_eq!(
        decoded_here,
        [
            "pre_llm_call",
            "pre_api_request",
            "post_api_request",
            "pre_tool_call",
            "post_auxiliary_call"
        ]
    );
}

#[test]
fn quick_verdicts_never_let_through_what_the_writer_would_stop() {
    // $1.00 a day: 40 calls of $0.025 reach the hard line.
    quick_against_the_writer("timezone = \"UTC\"\n[global]\ndaily = 1.0\n", Some(20));
}

#[test]
fn quick_verdicts_keep_a_rolling_budget() {
    quick_against_the_writer("timezone = \"UTC\"\n[global]\n5h = 1.0\n", Some(20));
}

/// Under a request rate limit, requests go ahead on the hook thread while
/// the last verdict's headroom holds, and never one past the limit: of 40
/// requests of two sessions in a second under 20 a minute, 20 go and 20
/// are stopped.
#[test]
fn quick_answers_never_let_a_request_past_a_request_rate_limit() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "timezone = \"UTC\"\n[global]\nrequests_per_minute = 20\n");
    let mut cfg = BridgeConfig::new(dir.path().to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let gate = BudgetGate::for_store_dir(dir.path(), None, false);
    let handle = gate.handle();
    let bridge = Bridge::start_with_gate(cfg, Box::new(gate));
    let (mut quick, mut went, mut stopped) = (0, 0, 0);
    for i in 0..40 {
        // Two sessions, a turn (a pre_llm_call verdict) before every other
        // request: the measures of each session's requests carry over.
        let session = format!("q{}", i % 2);
        if i % 4 < 2 {
            let turn = json!({"session_id": session, "turn_id": format!("{session}:{i}"), "model": "gpt-4o",
                              "platform": "cli"});
            assert!(matches!(
                spooled(&bridge, "pre_llm_call", turn),
                Outcome::Queued | Outcome::Committed(_)
            ));
        }
        let id = format!("r{i}");
        let request = json!({"session_id": session, "turn_id": format!("{session}:t"), "api_request_id": id,
                             "model": "gpt-4o", "platform": "cli", "approx_input_tokens": 10, "max_tokens": 0});
        match spooled(&bridge, "pre_api_request", request) {
            Outcome::Queued => quick += 1,
            Outcome::Committed(None) => {}
            other => panic!("pre_api_request {i}: {other:?}"),
        }
        match handle.stop_for(&id) {
            Some(text) => {
                assert!(text.contains("rate limit of 20 requests per minute"), "{text}");
                stopped += 1;
            }
            None => went += 1,
        }
    }
    assert!(bridge.flush(Duration::from_secs(10)));
    assert_eq!((went, stopped), (20, 20), "{quick} quick");
    assert!(quick >= 5, "requests under the limit went ahead quickly: {quick}");
}

/// A request limit of one model holds that model's requests and leaves
/// another model's alone: those go ahead quickly once measured.
#[test]
fn a_models_request_limit_holds_its_requests_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(
        dir.path(),
        "timezone = \"UTC\"\n[per_model.overrides.gpt-4o]\nrequests_per_minute = 5\n",
    );
    let mut cfg = BridgeConfig::new(dir.path().to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let gate = BudgetGate::for_store_dir(dir.path(), None, false);
    let handle = gate.handle();
    let bridge = Bridge::start_with_gate(cfg, Box::new(gate));
    let run = |model: &str, n: usize| {
        let (mut quick, mut stopped) = (0, 0);
        for i in 0..n {
            let id = format!("{model}:{i}");
            let request = json!({"session_id": model, "turn_id": format!("{model}:t"), "api_request_id": id,
                                 "model": model, "platform": "cli", "approx_input_tokens": 10, "max_tokens": 0});
            if spooled(&bridge, "pre_api_request", request) == Outcome::Queued {
                quick += 1;
            }
            stopped += usize::from(handle.stop_for(&id).is_some());
        }
        (quick, stopped)
    };
    let (quick, stopped) = run("mistral-large", 20);
    assert_eq!(stopped, 0);
    assert!(quick >= 15, "another model's requests go ahead quickly: {quick}");
    let (_, stopped) = run("gpt-4o", 10);
    assert_eq!(stopped, 5, "five a minute for gpt-4o");
    assert!(bridge.flush(Duration::from_secs(10)));
}

#[test]
fn quick_verdicts_keep_a_session_cap_in_usd() {
    quick_against_the_writer("[per_session]\nusd = 1.0\n", Some(20));
}

#[test]
fn quick_verdicts_keep_a_tool_call_cap() {
    // Every event recorded since a measure counts as a tool call: quick
    // answers come while far from the cap, fewer than under a USD one.
    quick_against_the_writer("[per_session]\ntool_calls = 30\n", Some(10));
}

#[test]
fn a_token_cap_is_never_answered_quickly() {
    // The quick view counts no tokens: every gated call waits for the writer.
    quick_against_the_writer("[per_session]\ntokens = 400000\n", None);
}

#[test]
fn a_calendar_token_budget_is_never_answered_quickly() {
    quick_against_the_writer("[global]\ndaily = 10.0\ndaily_tokens = 400000\n", None);
}

/// A session that spent past its cap in an earlier process: a new
/// process's first gated call of it waits for the writer, which blocks it
/// (its spend is older than anything the new quick view measured).
#[test]
fn a_session_capped_in_an_earlier_process_is_blocked_by_the_next_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "[per_session]\nusd = 0.04\n");
    let (first, _) = gated_bridge(dir.path());
    spooled(
        &first,
        "pre_llm_call",
        json!({"session_id": "old", "turn_id": "old:1", "model": "gpt-4o"}),
    );
    for n in 0..2 {
        let call = json!({"session_id": "old", "turn_id": "old:1", "api_request_id": format!("old:{n}"),
                          "model": "gpt-4o", "api_duration": 0.5, "usage": {"input_tokens": 10_000, "output_tokens": 0}});
        spooled(&first, "post_api_request", call);
    }
    first.shutdown(Duration::from_secs(10));
    let (next, _) = gated_bridge(dir.path());
    warm_up(&next);
    let tool = json!({"session_id": "old", "tool_call_id": "c9", "tool_name": "terminal"});
    match spooled(&next, "pre_tool_call", tool) {
        Outcome::Committed(Some(Verdict::Block { message })) => {
            assert!(message.contains("per-session usd"), "{message}")
        }
        other => panic!("the capped session went ahead: {other:?}"),
    }
    next.shutdown(Duration::from_secs(10));
}

/// Past the downgrade line and under the notice line, a new session's
/// first LLM call is downgraded too: its `pre_llm_call` waits for the
/// writer (no quick answer), whose verdict routes the call before Hermes
/// asks the `llm_request` middleware.
#[test]
fn a_new_sessions_first_call_past_the_downgrade_line_is_downgraded() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(
        dir.path(),
        "timezone = \"UTC\"\n[global]\ndaily = 1.0\n[downgrade]\nat = 0.5\nto = \"gpt-4o-mini\"\n",
    );
    let (first, _) = gated_bridge(dir.path());
    spooled(
        &first,
        "pre_llm_call",
        json!({"session_id": "old", "turn_id": "old:1", "model": "gpt-4o"}),
    );
    // 24 calls of $0.025: $0.60, past the line at $0.50, under the notice at $0.80.
    for n in 0..24 {
        let call = json!({"session_id": "old", "turn_id": "old:1", "api_request_id": format!("old:{n}"),
                          "model": "gpt-4o", "api_duration": 0.5, "usage": {"input_tokens": 10_000, "output_tokens": 0}});
        spooled(&first, "post_api_request", call);
    }
    first.shutdown(Duration::from_secs(10));
    // The next process (a cron run, `hermes -z`): its quick view is
    // measured with the spend past the line.
    let (next, handle) = gated_bridge(dir.path());
    warm_up(&next);
    for session in ["cron_0123456789ab_20261201_120000", "new"] {
        spooled(
            &next,
            "pre_llm_call",
            json!({"session_id": session, "turn_id": format!("{session}:1"), "model": "gpt-4o"}),
        );
        assert_eq!(
            handle.downgrade_for(session, Some("gpt-4o")).as_deref(),
            Some("gpt-4o-mini"),
            "{session}'s first call goes to the cheaper model"
        );
    }
    next.shutdown(Duration::from_secs(10));
}

/// A verdict is decided on what came before its event: it leaves out the
/// tool calls that started with or after the asking one and the asking
/// call's own reservation, which this process already counts as applied.
/// The headroom it leaves for the hook threads must count them, or a quick
/// answer lets through what the writer would stop.
#[test]
fn a_headroom_counts_what_its_verdict_left_out() {
    // A store under `budgets`, its gate on the real clock, and a session
    // `s` whose turn began now.
    let started = |budgets: &str, s: &str| {
        let dir = tempfile::tempdir().expect("temp dir");
        write_budgets(dir.path(), budgets);
        let mut store = Writer::open_dir(dir.path()).expect("open");
        let gate = BudgetGate::for_store_dir(dir.path(), None, false);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        apply(&mut store, &pre_llm(s, &format!("{s}:t1"), t, "cli", ""));
        (dir, store, gate, t)
    };
    let queued = |usd: f64, tool_calls: u64| QueuedSpend {
        usd,
        unknown: 0,
        tool_calls,
        requests: 0,
    };
    // Tool calls: a cap of 3; two calls in one batch, the verdict asked
    // for the first (the hook threads' bases count both).
    let (_dir, mut store, mut gate, t) = started("[per_session]\ntool_calls = 3\n", "s");
    let (c1, c2) = (pre_tool("s", "c1", t + 0.1), pre_tool("s", "c2", t + 0.2));
    apply(&mut store, &c1);
    apply(&mut store, &c2);
    gate.applied(0.0, 2);
    assert_eq!(gate.verdict(&store, &c1), None, "no call before the first");
    let quick = gate.quick().expect("the budget gate answers quickly");
    apply(&mut store, &pre_tool("s", "c3", t + 0.3));
    let c4 = pre_tool("s", "c4", t + 0.4);
    assert!(
        !quick.no_verdict(&c4, queued(0.0, 4)),
        "the fourth call went ahead quickly, but the writer blocks it"
    );
    assert!(blocked(gate.verdict(&store, &c4)).contains("per-session tool_calls"));

    // Dollars: a cap of $0.10, $0.05 spent, and a call of $0.025 reserved
    // whose own verdict does not count it.
    let (_dir, mut store, mut gate, t) = started("[per_session]\nusd = 0.1\n", "u");
    apply(&mut store, &post_api("u", "a0", t + 0.1, true));
    apply(&mut store, &post_api("u", "a1", t + 0.2, true));
    let own = pre_api("u", "a2", t + 0.3);
    apply(&mut store, &own);
    let applied = 3.0 * CALL_USD;
    gate.applied(applied, 0);
    assert_eq!(gate.verdict(&store, &own), None);
    assert_eq!(gate.handle().stop_for("a2"), None, "$0.05 before the call: it goes");
    let quick = gate.quick().expect("the budget gate answers quickly");
    // The session's next call reserves $0.03: $0.05 + $0.025 + $0.03 is
    // past the cap, so it must wait for the writer; $0.01 would not be.
    let next = pre_api("u", "a3", t + 0.4);
    assert!(
        !quick.no_verdict(&next, queued(applied + 0.03, 0)),
        "a call went ahead quickly past the cap"
    );
    assert!(
        quick.no_verdict(&next, queued(applied + 0.01, 0)),
        "$0.085 is under the cap: no need to wait"
    );
}

/// The store's cap peaks are the largest family's use (a subagent's calls
/// and tool calls count toward its root, also when it is linked after it
/// spent).
#[test]
fn the_cap_peaks_are_the_largest_familys_use() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let t = ts("2026-11-30T12:00:00Z");
    apply(&mut store, &pre_llm("p", "p:t1", t, "cli", ""));
    apply(&mut store, &post_api("p", "a0", t + 1.0, true));
    apply(&mut store, &subagent("p", "p:t1", "c", t + 2.0));
    apply(&mut store, &post_api("c", "b0", t + 3.0, true));
    apply(&mut store, &pre_tool("c", "x1", t + 4.0));
    apply(&mut store, &pre_tool("p", "x2", t + 5.0));
    let (usd, tools) = store.cap_peaks().expect("peaks");
    assert!((usd - 2.0 * CALL_USD).abs() < 1e-12, "{usd}");
    assert_eq!(tools, 2);
    // A smaller family changes nothing.
    apply(&mut store, &pre_llm("q", "q:t1", t + 6.0, "cli", ""));
    apply(&mut store, &post_api("q", "e0", t + 7.0, true));
    assert!((store.cap_peaks().expect("peaks").0 - 2.0 * CALL_USD).abs() < 1e-12);
    // A session that spent on its own, then linked as a subagent of `q`:
    // the family is both, $0.075.
    apply(&mut store, &pre_llm("d", "d:t1", t + 8.0, "cli", ""));
    apply(&mut store, &post_api("d", "f0", t + 9.0, true));
    apply(&mut store, &post_api("d", "f1", t + 10.0, true));
    apply(&mut store, &subagent("q", "q:t1", "d", t + 11.0));
    let (usd, _) = store.cap_peaks().expect("peaks");
    assert!((usd - 3.0 * CALL_USD).abs() < 1e-12, "{usd}");
    assert_eq!(store.cap_peaks().expect("peaks").1, 2, "q's family started none");
}

/// Under per-session and per-run caps, a session's first gated call in a
/// process goes ahead at once while no family of the store is near a cap
/// (the store's peaks), and every quick answer is the writer's: once a
/// family reaches a cap, a new session's first call waits for its verdict.
#[test]
fn a_new_sessions_first_call_is_quick_while_no_family_is_near_a_cap() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "[per_session]\nusd = 0.1\n[per_run]\ntool_calls = 1000\n");
    let mut cfg = BridgeConfig::new(dir.path().to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let bridge = Bridge::start_with_gate(cfg, Box::new(BudgetGate::for_store_dir(dir.path(), None, false)));
    let reader = Writer::open_dir(dir.path()).expect("reader");
    let mut oracle = BudgetGate::for_store_dir(dir.path(), None, false);
    let first = |s: &str, c: &str| json!({"session_id": s, "tool_call_id": c, "tool_name": "terminal"});
    eventually("the first refresh", || {
        spooled(&bridge, "pre_tool_call", first("warm", "w0")) == Outcome::Queued
    });
    let (mut quick_first, mut waited_after_peak) = (0, 0);
    for i in 0..12 {
        let s = format!("n{i}");
        let peak_reached = reader.cap_peaks().expect("peaks").0 >= 0.1 - 1e-9;
        let outcome = spooled(&bridge, "pre_tool_call", first(&s, "c0"));
        assert!(bridge.flush(Duration::from_secs(10)));
        let at: f64 = reader
            .query_scalar(&format!(
                "SELECT started_at FROM tool_calls WHERE session_id = '{s}' AND tool_call_id = 'c0'"
            ))
            .expect("recorded");
        let expected = oracle.verdict(&reader, &event("pre_tool_call", at, first(&s, "c0")));
        match outcome {
            Outcome::Queued => {
                assert_eq!(
                    expected, None,
                    "session {s}'s first call went ahead, the writer blocks it"
                );
                assert!(!peak_reached, "a first call went ahead though a family is at the cap");
                quick_first += 1;
            }
            Outcome::Committed(_) => waited_after_peak += usize::from(peak_reached),
            other => panic!("{other:?}"),
        }
        // Each session spends i % 5 calls of $0.025: the fifth reaches the
        // per-session cap.
        for n in 0..i % 5 {
            let call = json!({"session_id": s, "turn_id": format!("{s}:t"), "api_request_id": format!("{s}:{n}"),
                              "model": "gpt-4o", "platform": "cli", "api_duration": 0.5,
                              "usage": {"input_tokens": 10_000, "output_tokens": 0}});
            spooled(&bridge, "post_api_request", call);
        }
        assert!(bridge.flush(Duration::from_secs(10)));
    }
    assert!(quick_first >= 2, "first calls answered quickly: {quick_first}");
    assert!(
        waited_after_peak >= 3,
        "first calls after the peak waited: {waited_after_peak}"
    );
}

/// Fifty calls of $0.025 and fifty tool calls in one session under
/// `budgets`: each quick answer must be the writer's, and at least
/// `min_quick` tool and LLM answers are quick (`None`: none is).
fn quick_against_the_writer(budgets: &str, min_quick: Option<usize>) {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), budgets);
    let mut cfg = BridgeConfig::new(dir.path().to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let bridge = Bridge::start_with_gate(cfg, Box::new(BudgetGate::for_store_dir(dir.path(), None, false)));
    // The oracle: another gate over another connection, asked after each
    // step has committed.
    let reader = Writer::open_dir(dir.path()).expect("reader");
    let mut oracle = BudgetGate::for_store_dir(dir.path(), None, false);
    let soft_line = hermes_meter_model::budget::BudgetConfig::default().soft_threshold;
    let (mut quick_tools, mut quick_llm, mut notice_at, mut blocked) = (0, 0, None, 0);
    for i in 0..50 {
        let id = format!("q:{i}");
        let call = json!({"session_id": "q", "turn_id": "q:t", "api_request_id": id, "model": "gpt-4o",
                          "platform": "cli", "api_duration": 0.5, "assistant_content_chars": 0,
                          "usage": {"input_tokens": 10_000, "output_tokens": 0}});
        assert_eq!(spooled(&bridge, "post_api_request", call), Outcome::Queued);
        let llm = spooled(
            &bridge,
            "pre_llm_call",
            json!({"session_id": "q", "turn_id": format!("q:{i}"), "model": "gpt-4o", "platform": "cli"}),
        );
        let tool = json!({"session_id": "q", "tool_call_id": format!("c{i}"), "tool_name": "terminal"});
        let tool_outcome = spooled(&bridge, "pre_tool_call", tool.clone());
        assert!(bridge.flush(Duration::from_secs(10)));
        let spent = reader.spend_total().expect("spend");
        match llm {
            Outcome::Queued => quick_llm += 1,
            Outcome::Committed(Some(Verdict::Context { text })) if text.contains("soft") || text.contains("%") => {
                notice_at.get_or_insert(i);
            }
            Outcome::Committed(_) => {}
            other => panic!("pre_llm_call {i}: {other:?}"),
        }
        // Asked as of the call's own time: the tool calls before it count.
        let at: f64 = reader
            .query_scalar(&format!(
                "SELECT started_at FROM tool_calls WHERE tool_call_id = 'c{i}'"
            ))
            .expect("recorded");
        let expected = oracle.verdict(&reader, &event("pre_tool_call", at, tool));
        match tool_outcome {
            Outcome::Queued => {
                quick_tools += 1;
                assert_eq!(
                    expected, None,
                    "call {i} went ahead quickly at ${spent:.3} but the writer blocks it"
                );
            }
            Outcome::Committed(v) => {
                assert_eq!(
                    v.is_some(),
                    expected.is_some(),
                    "call {i} at ${spent:.3}: {v:?} vs {expected:?}"
                );
                blocked += usize::from(v.is_some());
            }
            other => panic!("pre_tool_call {i}: {other:?}"),
        }
        // The soft notice comes at the first turn past the soft line.
        if notice_at.is_none() {
            assert!(spent < soft_line, "no notice at ${spent:.3} (call {i})");
        }
    }
    assert!(notice_at.is_some(), "the soft notice was given");
    assert!(blocked >= 10, "the calls past the limit were blocked: {blocked}");
    match min_quick {
        Some(n) => assert!(
            quick_tools >= n && quick_llm >= n,
            "quick verdicts: {quick_tools} tool, {quick_llm} llm"
        ),
        None => assert_eq!((quick_tools, quick_llm), (0, 0), "no quick verdict"),
    }
}

#[test]
fn a_batch_adds_to_the_spend_rollups_exactly_what_its_events_add_one_by_one() {
    // Calls of three sessions over two days, several to a bucket, with and
    // without usage (estimated costs): applied one by one in one store and
    // in one transaction in another, the rollup rows must be equal.
    let start = ts("2026-11-17T22:50:00Z");
    let mut events = Vec::new();
    for n in 0..60 {
        let session = format!("s{}", n % 3);
        let at = start + f64::from(n) * 97.0;
        let id = format!("{session}:a{n}");
        events.push(pre_llm(
            &session,
            &format!("{session}:t"),
            at,
            "cli",
            &format!("u{}", n % 2),
        ));
        events.push(pre_api(&session, &id, at + 0.5));
        events.push(post_api(&session, &id, at + 1.0, n % 4 != 0));
    }
    let rows = |dir: &Path| -> Vec<(String, String, i64, i64, f64, f64, i64)> {
        let conn = rusqlite::Connection::open(dir.join(hermes_meter_store::DB_FILE_NAME)).expect("open");
        let mut stmt = conn
            .prepare(
                "SELECT scope, id, level, bucket, cost_usd, estimated_usd, calls FROM budget_spend
                 ORDER BY scope, id, level, bucket",
            )
            .expect("prepare");
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })
            .expect("query");
        rows.collect::<rusqlite::Result<_>>().expect("rows")
    };
    let (one, batch) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let mut store = Writer::open_dir(one.path()).expect("open");
    for e in &events {
        apply(&mut store, e);
    }
    let ctx = EventContext::default();
    let mut store = Writer::open_dir(batch.path()).expect("open");
    store.apply_batch(events.iter().map(|e| (e, &ctx))).expect("batch");
    let (one, batch) = (rows(one.path()), rows(batch.path()));
    assert!(one.len() > 20, "{}", one.len());
    assert!(one.iter().any(|r| r.6 > 1), "several calls share a bucket");
    assert!(one.iter().any(|r| r.5 > 0.0), "estimated costs are rolled up too");
    assert_eq!(one, batch);
}

#[test]
fn a_pause_hermes_refused_is_offered_again_until_it_is_given_up() {
    use hermes_meter_runtime::budget::{CronPause, MAX_PAUSE_ATTEMPTS, PAUSE_RETRY};
    use std::time::Instant;
    let dir = tempfile::tempdir().expect("temp dir");
    let handle = gate(dir.path()).handle();
    let pause = CronPause {
        job_id: "3f9a1c2b7d10".into(),
        reason: "cron job daily budget spent".into(),
        attempt: 1,
    };
    let t0 = Instant::now();
    assert!(handle.pause_failed(pause.clone(), t0));
    // Not before the retry delay, then once.
    assert!(handle.take_pauses_at(t0).is_empty());
    assert!(handle
        .take_pauses_at(t0 + PAUSE_RETRY - Duration::from_millis(1))
        .is_empty());
    let again = handle.take_pauses_at(t0 + PAUSE_RETRY);
    assert_eq!(again, vec![CronPause { attempt: 2, ..pause }]);
    assert!(handle.take_pauses_at(t0 + 10 * PAUSE_RETRY).is_empty());
    // Refused every time, it is tried MAX_PAUSE_ATTEMPTS times in all.
    let (mut p, mut now) = (again[0].clone(), t0 + PAUSE_RETRY);
    while handle.pause_failed(p.clone(), now) {
        now += PAUSE_RETRY;
        p = handle.take_pauses_at(now).pop().expect("offered again");
    }
    assert_eq!(p.attempt, MAX_PAUSE_ATTEMPTS);
    assert!(handle.take_pauses_at(now + 10 * PAUSE_RETRY).is_empty());
}

#[test]
fn alert_thresholds_reach_the_next_llm_call_once_each_even_on_the_quick_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    // gpt-4o at $2.50 / $10 per million: 1000 in + 100 out is $0.0035, 35%.
    write_budgets(
        dir.path(),
        "timezone = \"UTC\"\nalert_thresholds = [0.25, 0.5]\n[global]\ndaily = 0.01\n",
    );
    let mut cfg = BridgeConfig::new(dir.path().to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let bridge = Bridge::start_with_gate(cfg, Box::new(BudgetGate::for_store_dir(dir.path(), None, false)));
    let llm = |turn: &str| json!({"session_id": "a", "turn_id": turn, "model": "gpt-4o"});
    let spend = |n: u32| {
        let call = json!({"session_id": "a", "turn_id": "a:0", "api_request_id": format!("a:0:api:{n}"),
                          "model": "gpt-4o", "api_duration": 0.01,
                          "usage": {"input_tokens": 1000, "output_tokens": 100}});
        spooled(&bridge, "post_api_request", call);
        assert!(bridge.flush(Duration::from_secs(10)));
    };
    let notice = |turn: &str| match spooled(&bridge, "pre_llm_call", llm(turn)) {
        Outcome::Committed(v) => context(v),
        other => panic!("{turn}: expected a verdict, got {other:?}"),
    };
    // Nothing spent: once measured, nothing to wait for.
    eventually("the first measure", || {
        spooled(&bridge, "pre_llm_call", llm("a:0")) == Outcome::Queued
    });
    spend(1);
    let first = notice("a:1").expect("the 25% alert");
    assert!(
        first.contains("past its 25% alert") && first.contains("(35%)"),
        "{first}"
    );
    // Said once; the next line (50%) is not reached, so no wait either.
    assert!(bridge.flush(Duration::from_secs(10)));
    assert_eq!(spooled(&bridge, "pre_llm_call", llm("a:2")), Outcome::Queued);
    spend(2);
    let second = notice("a:3").expect("the 50% alert");
    assert!(
        second.contains("past its 50% alert") && !second.contains("25%"),
        "{second}"
    );
    assert!(bridge.flush(Duration::from_secs(10)));
    assert_eq!(
        spooled(&bridge, "pre_llm_call", llm("a:4")),
        Outcome::Queued,
        "each threshold once per window"
    );
    // Past the hard line: the hard notice, no threshold again.
    spend(3);
    let hard = notice("a:5").expect("the hard notice");
    assert!(hard.contains("is exhausted") && !hard.contains("alert]"), "{hard}");
    bridge.shutdown(Duration::from_secs(10));
    let store = Writer::open_dir(dir.path()).expect("open");
    let kinds: i64 = store
        .query_scalar("SELECT COUNT(*) FROM alerts WHERE kind = 'budget_threshold'")
        .expect("alerts");
    assert_eq!(kinds, 2);
}

/// Applies `e` and shows it to the gate's runaway watch, as the writer does.
fn committed(store: &mut Writer, gate: &mut BudgetGate, e: &HookEvent) {
    apply(store, e);
    gate.observe(store, e);
}

fn terminal(session: &str, call: &str, at: f64, command: &str) -> HookEvent {
    event(
        "pre_tool_call",
        at,
        json!({"session_id": session, "tool_call_id": call, "tool_name": "terminal", "args": {"command": command}}),
    )
}

fn runaway_alerts(store: &Writer) -> Vec<String> {
    store
        .alerts()
        .expect("alerts")
        .into_iter()
        .filter(|a| a.kind == "runaway")
        .map(|a| a.text)
        .collect()
}

#[test]
fn a_loop_of_identical_tool_calls_raises_one_runaway_alert_by_default() {
    let dir = tempfile::tempdir().expect("temp dir");
    // No budget file: runaway detection is on, alerting.
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = BudgetGate::for_store_dir(dir.path(), None, false);
    let needs = gate.needs();
    assert!(
        !needs.pre_tool_call.load(Ordering::Acquire) && !needs.pre_api_request.load(Ordering::Acquire),
        "alerting makes no call wait"
    );
    let t = ts("2026-11-30T03:00:00Z");
    let s = "s-loop";
    committed(&mut store, &mut gate, &pre_llm(s, "s:t1", t, "cron", ""));
    // Thirty different commands are work, not a loop.
    for n in 0..30 {
        let e = terminal(s, &format!("w{n}"), t + f64::from(n), &format!("make step{n}"));
        committed(&mut store, &mut gate, &e);
    }
    assert!(runaway_alerts(&store).is_empty());
    // The same command nine times is not one yet; the tenth is.
    for n in 0..9 {
        committed(
            &mut store,
            &mut gate,
            &terminal(s, &format!("l{n}"), t + 40.0 + f64::from(n), "sleep 5"),
        );
    }
    assert!(runaway_alerts(&store).is_empty());
    committed(&mut store, &mut gate, &terminal(s, "l9", t + 50.0, "sleep 5"));
    let alerts = runaway_alerts(&store);
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert!(
        alerts[0].contains("terminal called 10 times in a row with the same arguments"),
        "{}",
        alerts[0]
    );
    assert!(alerts[0].contains("nothing was stopped"), "{}", alerts[0]);
    // Alerting blocks nothing, and the alert is raised once per run.
    for n in 10..20 {
        let e = terminal(s, &format!("l{n}"), t + 50.0 + f64::from(n), "sleep 5");
        committed(&mut store, &mut gate, &e);
        assert_eq!(gate.verdict(&store, &e), None);
    }
    assert_eq!(runaway_alerts(&store).len(), 1);
    // The next turn's pre_llm_call shows it.
    let next = pre_llm(s, "s:t2", t + 80.0, "cron", "");
    committed(&mut store, &mut gate, &next);
    let shown = context(gate.verdict(&store, &next)).expect("the alert");
    assert!(
        shown.contains("RUNAWAY: session s-loop looks stuck in a loop"),
        "{shown}"
    );
    let counts = store.budget_verdict_counts().expect("counts");
    assert!(counts.contains(&("runaway", 1)), "{counts:?}");
}

#[test]
fn a_runaway_run_is_stopped_with_action_stop_until_the_next_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "[runaway]\naction = \"stop\"\nrepeated_tool_calls = 3\n");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = BudgetGate::for_store_dir(dir.path(), None, false);
    let handle = gate.handle();
    let needs = gate.needs();
    let waits = || needs.pre_tool_call.load(Ordering::Acquire) && needs.pre_api_request.load(Ordering::Acquire);
    // Only the watch on the writer thread sees the signs: every tool call
    // and request waits for it, none is let through quickly.
    assert!(
        waits(),
        "with action = stop, tool calls and requests wait for the watch"
    );
    let quick = gate.quick().expect("the budget gate answers quickly");
    let nothing_queued = QueuedSpend::default();
    let t = ts("2026-11-30T03:00:00Z");
    let s = "s-stuck";
    assert!(!quick.no_verdict(&terminal(s, "c0", t, "ls"), nothing_queued));
    assert!(!quick.no_verdict(&pre_api(s, "a0", t), nothing_queued));
    committed(&mut store, &mut gate, &pre_llm(s, "s:t1", t, "cli", ""));
    committed(&mut store, &mut gate, &subagent(s, "s:t1", "s-helper", t + 0.5));
    // The third identical call shows the sign and is the first one stopped.
    for n in 0..3 {
        let e = terminal(s, &format!("c{n}"), t + 1.0 + f64::from(n), "curl localhost:9");
        committed(&mut store, &mut gate, &e);
        let verdict = gate.verdict(&store, &e);
        if n < 2 {
            assert_eq!(verdict, None, "call {n}");
        } else {
            let message = blocked(verdict);
            assert!(
                message.contains("session s-stuck") && message.contains("terminal called 3 times in a row"),
                "{message}"
            );
            assert!(
                message.contains("stopped its tool and LLM calls until the next message"),
                "{message}"
            );
        }
    }
    // Any later tool call of the run, whatever its arguments.
    let e = terminal(s, "c3", t + 5.0, "ls");
    committed(&mut store, &mut gate, &e);
    assert!(blocked(gate.verdict(&store, &e)).contains("RUNAWAY"));
    // Its LLM calls and its subagent's are stopped before the provider too.
    for (session, id) in [(s, "a1"), ("s-helper", "b1")] {
        let api = pre_api(session, id, t + 6.0);
        committed(&mut store, &mut gate, &api);
        assert_eq!(gate.verdict(&store, &api), None);
        assert!(handle.stop_for(id).expect("stopped").starts_with("RUNAWAY"), "{id}");
    }
    // Another session is not affected.
    let other = pre_llm("s-other", "o:t1", t + 6.0, "cli", "");
    committed(&mut store, &mut gate, &other);
    let e = terminal("s-other", "o1", t + 7.0, "ls");
    committed(&mut store, &mut gate, &e);
    assert_eq!(gate.verdict(&store, &e), None);
    // The next message is a new run.
    apply(&mut store, &end_turn(s, "s:t1", t + 8.0));
    committed(&mut store, &mut gate, &pre_llm(s, "s:t2", t + 9.0, "cli", ""));
    assert!(waits(), "action = stop still watches every call");
    let e = terminal(s, "c4", t + 10.0, "curl localhost:9");
    committed(&mut store, &mut gate, &e);
    assert_eq!(gate.verdict(&store, &e), None);
}

#[test]
fn many_api_calls_per_tool_call_and_endless_retries_are_runaways() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = BudgetGate::for_store_dir(dir.path(), None, false);
    let t = ts("2026-11-30T03:00:00Z");
    // 40 API calls and no tool call in one run.
    let s = "s-chatty";
    committed(&mut store, &mut gate, &pre_llm(s, "s:t1", t, "cli", ""));
    for n in 0..39 {
        committed(
            &mut store,
            &mut gate,
            &post_api(s, &format!("a{n}"), t + 2.0 * f64::from(n), true),
        );
    }
    assert!(runaway_alerts(&store).is_empty(), "39 calls are under the minimum");
    committed(&mut store, &mut gate, &post_api(s, "a39", t + 100.0, true));
    let alerts = runaway_alerts(&store);
    assert!(
        alerts.len() == 1 && alerts[0].contains("40 API calls for 0 tool calls in this run"),
        "{alerts:?}"
    );
    // One request retried ten times.
    let r = "s-retry";
    committed(&mut store, &mut gate, &pre_llm(r, "r:t1", t, "cli", ""));
    for n in 0..=10 {
        let e = event(
            "api_request_error",
            t + f64::from(n),
            json!({"session_id": r, "turn_id": "r:t1", "api_request_id": "r:api:1", "model": "gpt-4o",
                   "status_code": 500, "retryable": true, "retry_count": n}),
        );
        committed(&mut store, &mut gate, &e);
    }
    let alerts = runaway_alerts(&store);
    assert!(
        alerts.iter().any(|a| a.contains("one request retried 10 times")),
        "{alerts:?}"
    );
}

/// A long cached context read again at every call is ordinary work: an
/// agent with 150k tokens of cached context and a distinct tool call
/// every 4 s reads 2.25M tokens a minute from the cache, and is no
/// runaway; the same tokens sent fresh are a flood.
#[test]
fn cache_reads_do_not_count_toward_the_token_flood() {
    for (cached, runaway) in [(true, false), (false, true)] {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Writer::open_dir(dir.path()).expect("open");
        let mut gate = BudgetGate::for_store_dir(dir.path(), None, false);
        let t = ts("2026-11-30T03:00:00Z");
        let s = "s-long-context";
        committed(&mut store, &mut gate, &pre_llm(s, "s:t1", t, "cli", ""));
        for n in 0..20 {
            let at = t + 4.0 * f64::from(n);
            let (input, cache_read) = if cached { (2_000, 150_000) } else { (152_000, 0) };
            let call = event(
                "post_api_request",
                at,
                json!({"session_id": s, "turn_id": "s:t1", "api_request_id": format!("a{n}"), "model": "gpt-4o",
                       "platform": "cli", "api_duration": 1.0, "ended_at": at,
                       "usage": {"input_tokens": input, "output_tokens": 500, "cache_read_tokens": cache_read,
                                 "cache_write_tokens": 0, "reasoning_tokens": 0}}),
            );
            committed(&mut store, &mut gate, &call);
            let tool = terminal(s, &format!("c{n}"), at + 1.0, &format!("grep -n step{n} src/lib.rs"));
            committed(&mut store, &mut gate, &tool);
        }
        let alerts = runaway_alerts(&store);
        assert_eq!(!alerts.is_empty(), runaway, "cached {cached}: {alerts:?}");
        if runaway {
            assert!(alerts[0].contains("tokens"), "{alerts:?}");
        }
    }
}

/// The defaults never fire on what real Hermes runs recorded.
#[test]
fn no_recorded_run_is_a_runaway() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut gate = BudgetGate::for_store_dir(dir.path(), None, false);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut seen = 0;
    for entry in std::fs::read_dir(&fixtures).expect("fixtures") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).expect("read").lines() {
            let rec: Value = serde_json::from_str(line).expect("json");
            let hook = rec["hook"].as_str().expect("hook");
            let map = rec["kwargs"].as_object().expect("kwargs").clone();
            if let hermes_meter_model::hook::Decoded::Event(e, _) =
                hermes_meter_model::hook::decode(hook, &map, rec["t"].as_f64().unwrap_or(0.0), DecodeOptions::default())
            {
                committed(&mut store, &mut gate, &e);
                seen += 1;
            }
        }
    }
    assert!(seen > 150, "{seen}");
    assert!(runaway_alerts(&store).is_empty(), "{:?}", runaway_alerts(&store));
}

#[test]
fn the_agent_cannot_lift_its_own_brake_however_far_from_its_line() {
    // A budget nowhere near its line: every ordinary call goes ahead, with
    // no wait for the writer; a call that would change the meter is refused.
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(dir.path(), "[global]\ndaily = 1000\n");
    let mut cfg = BridgeConfig::new(dir.path().to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let bridge = Bridge::start_with_gate(cfg, Box::new(BudgetGate::for_store_dir(dir.path(), None, false)));
    let tool = |call: &str, name: &str, args: Value| json!({"session_id": "p", "tool_call_id": call, "tool_name": name, "args": args});
    let verdict = |kwargs: Value| match spooled(&bridge, "pre_tool_call", kwargs) {
        Outcome::Committed(v) => v,
        Outcome::Queued => None,
        other => panic!("unexpected {other:?}"),
    };
    eventually("the budget file's first load", || {
        bridge.flush(Duration::from_secs(10));
        !bridge.decodes_later("pre_tool_call")
    });
    assert_eq!(verdict(tool("c0", "terminal", json!({"command": "ls -la"}))), None);
    let store = dir.path().join("budgets.toml").display().to_string();
    for (n, (name, args)) in [
        (
            "terminal",
            json!({"command": "hermes-meter budget set global daily 1000000"}),
        ),
        (
            "terminal",
            json!({"command": format!("printf '[global]\\ndaily = 1e9\\n' > {store}")}),
        ),
        (
            "write_file",
            json!({"path": store, "content": "[global]\ndaily = 1e9\n"}),
        ),
        (
            "terminal",
            json!({"command": "echo HERMES_METER_BUDGET_MODE=observe >> ~/.hermes/.env"}),
        ),
        ("terminal", json!({"command": "hermes plugins disable hermes-meter"})),
    ]
    .into_iter()
    .enumerate()
    {
        match verdict(tool(&format!("c{}", n + 1), name, args.clone())) {
            Some(Verdict::Block { message }) => {
                assert!(message.starts_with("BUDGET-PROTECTED: "), "{message}");
                assert!(!message.contains("budget set"), "{message}");
            }
            other => panic!("{name} {args} went ahead: {other:?}"),
        }
    }
    // Reading the meter changes nothing of it.
    assert_eq!(verdict(tool("r1", "read_file", json!({"path": store}))), None);
    assert_eq!(
        verdict(tool("r2", "terminal", json!({"command": "hermes-meter budget list"}))),
        None
    );
}

/// An alert threshold crossed by this process's own spend is shown at the
/// next turn's `pre_llm_call`: the quick view never answers "nothing to
/// say" past a line it measured.
#[test]
fn an_alert_threshold_crossed_in_this_process_is_shown_at_the_next_turn() {
    for model in ["gpt-4o", "mock-model"] {
        alert_shown_at_the_next_turn(model);
    }
}

fn alert_shown_at_the_next_turn(model: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(
        dir.path(),
        "timezone = \"UTC\"\nalert_thresholds = [0.05]\n[global]\ndaily = 0.01\n",
    );
    let mut cfg = BridgeConfig::new(dir.path().to_path_buf());
    cfg.hook_wait = Duration::from_secs(10);
    let bridge = Bridge::start_with_gate(cfg, Box::new(BudgetGate::for_store_dir(dir.path(), None, false)));
    if bridge.needs_host_price(model) {
        // Priced by Hermes, as the e2e kit's mock-model is.
        bridge.set_host_price(model, hermes_meter_model::pricing::ModelPrice::flat(2.5, 10.0));
    }
    let turn = |n: u32| json!({"session_id": "s", "turn_id": format!("s:{n}"), "model": model, "platform": "cli"});
    spooled(&bridge, "pre_llm_call", turn(1));
    // $0.0025 (1,000 input tokens at $2.50 a million): 25 % of the limit, past the 5 % alert.
    let call = json!({"session_id": "s", "turn_id": "s:1", "api_request_id": "s:api:1", "model": model,
                      "platform": "cli", "api_duration": 0.5, "usage": {"input_tokens": 1_000, "output_tokens": 0}});
    let request = json!({"session_id": "s", "turn_id": "s:1", "api_request_id": "s:api:1", "model": model,
                         "platform": "cli", "approx_input_tokens": 1_000});
    spooled(&bridge, "pre_api_request", request);
    spooled(&bridge, "post_api_request", call);
    std::thread::sleep(Duration::from_millis(300));
    match spooled(&bridge, "pre_llm_call", turn(2)) {
        Outcome::Committed(Some(Verdict::Context { text })) => assert!(text.contains("past its 5% alert"), "{text}"),
        other => panic!("{model}: the alert was not shown: {other:?}"),
    }
    bridge.shutdown(Duration::from_secs(10));
}

/// A threshold crossed by the last call of a process (a `chat -q`, a cron
/// run) is shown at the next process's first turn: the crossing raises it.
#[test]
fn an_alert_threshold_crossed_by_a_process_that_ended_is_shown_by_the_next() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_budgets(
        dir.path(),
        "timezone = \"UTC\"\nalert_thresholds = [0.05]\n[global]\ndaily = 0.01\n",
    );
    let (first, _) = gated_bridge(dir.path());
    spooled(
        &first,
        "pre_llm_call",
        json!({"session_id": "a", "turn_id": "a:1", "model": "gpt-4o"}),
    );
    let call = json!({"session_id": "a", "turn_id": "a:1", "api_request_id": "a:api:1", "model": "gpt-4o",
                      "api_duration": 0.5, "usage": {"input_tokens": 1_000, "output_tokens": 0}});
    spooled(&first, "post_api_request", call);
    first.shutdown(Duration::from_secs(10));
    let (next, _) = gated_bridge(dir.path());
    warm_up(&next);
    match spooled(
        &next,
        "pre_llm_call",
        json!({"session_id": "b", "turn_id": "b:1", "model": "gpt-4o"}),
    ) {
        Outcome::Committed(Some(Verdict::Context { text })) => assert!(text.contains("past its 5% alert"), "{text}"),
        other => panic!("the alert was not shown: {other:?}"),
    }
    next.shutdown(Duration::from_secs(10));
}

/// `budget set` takes a rolling window in the words people use (`5h usd`,
/// `7d tokens`), and `budget list` says what is left and what frees when,
/// in its table and its JSON.
#[test]
fn a_rolling_budget_is_set_in_words_and_listed_with_what_frees_when() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let cli = |args: &[&str]| {
        let o = std::process::Command::new(hermes_meter_test_support::cli::binary())
            .env_remove("HERMES_METER_FLEET_URL")
            .arg("--home")
            .arg(&home)
            .args(args)
            .output()
            .expect("run hermes-meter");
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let said = cli(&["budget", "set", "global", "5h", "usd", "0.525"]);
    assert!(said.contains("global 5h limit set to $0.53"), "{said}");
    let said = cli(&["budget", "set", "global", "7d", "tokens", "50M"]);
    assert!(said.contains("global 7d_tokens limit set to 50M tokens"), "{said}");
    let file = std::fs::read_to_string(home.join("budgets.toml")).expect("the file");
    assert!(
        file.contains("5h = 0.525") && file.contains("7d_tokens = 50000000"),
        "{file}"
    );
    {
        let mut store = Writer::open_dir(&home).expect("open");
        let now = hermes_meter_store::unix_now();
        apply(&mut store, &pre_llm("s-list", "t0", now, "cli", ""));
        apply(&mut store, &post_api("s-list", "a0", now, true));
    }
    let listed = cli(&["budget", "list"]);
    let row = listed
        .lines()
        .find(|l| l.starts_with("global") && l.contains(" 5h "))
        .unwrap_or_else(|| panic!("a 5h row: {listed}"));
    assert!(
        row.contains("$0.50 left; it frees $0.03 at ") && row.contains("as spend leaves its rolling 5h window"),
        "{row}"
    );
    let v: Value = serde_json::from_str(&cli(&["budget", "list", "--json"])).expect("json");
    let five = v["budgets"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["key"] == "5h"))
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(five["rolling"], true);
    assert!((five["left_usd"].as_f64().expect("left") - 0.5).abs() < 1e-9, "{five}");
    assert!(
        (five["frees"]["amount_usd"].as_f64().expect("frees") - CALL_USD).abs() < 1e-9,
        "{five}"
    );
    let at = five["frees"]["at"].as_f64().expect("when");
    let now = hermes_meter_store::unix_now();
    assert!(
        at > now + 5.0 * 3600.0 - 60.0 && at <= now + 5.0 * 3600.0 + 900.0,
        "{five}"
    );
    let tokens = v["budgets"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["key"] == "7d_tokens"))
        .unwrap_or_else(|| panic!("{v}"));
    assert!(tokens["spend_tokens"].as_f64().expect("tokens") > 0.0, "{tokens}");
}
