//! `hermes-meter report`: tables for people, `--json` for scripts.

use std::fmt::Write as _;

use clap::Args;
use jiff::tz::TimeZone;

use super::time;
use hermes_meter_model::digest::Every;
use hermes_meter_model::display::escape;
use hermes_meter_model::display::human_count;
use hermes_meter_model::price_as::{PriceAs, PriceAsSums};
use hermes_meter_model::report::{Group, Report, Totals};
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::Reader;

/// The latest time a window can reach (9999-01-01T00:00:00Z).
const END_OF_TIME: f64 = 253_370_764_800.0;

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Start of the window: a date (midnight in --tz), an RFC 3339 time, or a span back from now (7d, 24h).
    #[arg(long)]
    since: Option<String>,
    /// End of the window (exclusive), same forms as --since.
    #[arg(long)]
    until: Option<String>,
    /// Time zone for days (IANA name, default: the system's).
    #[arg(long)]
    tz: Option<String>,
    /// Print one JSON object (schema in docs/cli.md, "Report JSON").
    #[arg(long)]
    json: bool,
    /// Rows per table in the human form.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// What the window's LLM calls would have cost at MODEL's prices (each
    /// call's own tokens), beside what they were billed.
    #[arg(long, value_name = "MODEL", conflicts_with = "digest")]
    price_as: Option<String>,
    /// The last complete day (or 7 days) against the one before: totals,
    /// top models, sessions, cron jobs and users, what grew out of line,
    /// and the budgets now.
    #[arg(long, value_name = "PERIOD", value_parser = ["day", "week"], conflicts_with_all = ["since", "until"])]
    digest: Option<String>,
}

/// The report's window and zone, read from the arguments.
pub(super) struct Window {
    tz: TimeZone,
    since: f64,
    until: f64,
}

/// Reads `--tz`, `--since` and `--until`. A window that ends before it
/// starts is an error: it would report zeros, which look like an answer.
pub(super) fn window(args: &ReportArgs) -> Result<Window> {
    let tz = match &args.tz {
        Some(name) => TimeZone::get(name).map_err(|e| Error::Other(format!("--tz {name}: {e}")))?,
        None => TimeZone::system(),
    };
    let now = hermes_meter_store::unix_now();
    let bound = |text: &Option<String>, default: f64, flag: &str| -> Result<f64> {
        match text {
            Some(t) => time::parse(t, &tz, now).map_err(|e| Error::Other(format!("{flag}: {e}"))),
            None => Ok(default),
        }
    };
    let since = bound(&args.since, 0.0, "--since")?;
    let until = bound(&args.until, END_OF_TIME, "--until")?;
    if until <= since {
        return Err(Error::Other(format!(
            "--until {} is not after --since {}: the window is empty; --since is its earlier end \
             (e.g. --since 7d --until 1d, or --since 2026-11-01 --until 2026-11-30)",
            args.until.as_deref().unwrap_or("-"),
            args.since.as_deref().unwrap_or("-"),
        )));
    }
    Ok(Window { tz, since, until })
}

pub(super) fn run(store: &Reader, dir: &std::path::Path, args: &ReportArgs, window: Window) -> Result<i32> {
    if let Some(model) = &args.price_as {
        return price_as(store, dir, args, &window, model);
    }
    if let Some(period) = &args.digest {
        return digest(store, dir, args, &window.tz, period);
    }
    let Window { tz, since, until } = window;
    // Rollups answer for most of the window (crates/hermes-meter-store/src/rollup.rs): the time
    // follows the buckets and keys printed, not the calls in the window.
    if args.json {
        // A large buffer: the session list is most of what is written
        // (about 600 bytes a session), in far fewer writes than 8 KiB ones.
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        write_json(store, &tz, since, until, &mut out)?;
    } else {
        // The human form lists only the sessions it shows.
        let report = store.report(&tz, since, until, Some(args.limit))?;
        print!("{}", render(&report, args.limit));
    }
    Ok(0)
}

/// `report --price-as MODEL`: the window re-priced at MODEL's prices from
/// the price table this store uses (the built-in one and pricing.toml).
fn price_as(store: &Reader, dir: &std::path::Path, args: &ReportArgs, window: &Window, model: &str) -> Result<i32> {
    let sums = match hermes_meter_runtime::advise::price_as(store, dir, model, window.since, window.until)? {
        Ok(sums) => sums,
        Err(why) => {
            eprintln!("hermes-meter: --price-as: {why}");
            return Ok(1);
        }
    };
    if args.json {
        let at = |t: f64| hermes_meter_model::budget::timestamp(t).to_string();
        let value = serde_json::json!({
            "since": at(window.since),
            "until": at(window.until),
            "price_as": sums,
            "caveats": sums.caveats(),
        });
        let text = serde_json::to_string_pretty(&value).map_err(|e| Error::Other(e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", render_price_as(&sums, args.limit));
    }
    Ok(0)
}

/// The human form of a re-pricing: totals, then by model and by kind of
/// session (most billed first), then the caveats.
fn render_price_as(r: &PriceAs, limit: usize) -> String {
    let mut out = String::new();
    let t = &r.totals;
    let saved = t.billed_usd - t.at_price_usd;
    let _ = writeln!(
        out,
        "{} LLM call(s) billed ${:.4}; at {}'s prices (priced as {}) they would have cost ${:.4}: {} by ${:.4} ({})",
        t.llm_calls,
        t.billed_usd,
        escape(&r.model),
        escape(&r.priced_as),
        t.at_price_usd,
        if saved >= 0.0 { "less" } else { "more" },
        saved.abs(),
        percent(t.at_price_usd, t.billed_usd),
    );
    for (title, groups) in [("by model billed", &r.by_model), ("by kind of session", &r.by_kind)] {
        let mut rows: Vec<(&String, &PriceAsSums)> = groups.iter().collect();
        rows.sort_by(|a, b| b.1.billed_usd.total_cmp(&a.1.billed_usd).then(a.0.cmp(b.0)));
        let _ = writeln!(out, "\n{title}");
        let _ = writeln!(
            out,
            "  {:<32} {:>8} {:>15} {:>12} {:>12} {:>8}",
            "", "calls", "tokens in/out", "billed", "at price", "change"
        );
        for (name, s) in rows.iter().take(limit) {
            let name: String = name.chars().take(32).collect();
            let _ = writeln!(
                out,
                "  {:<32} {:>8} {:>15} {:>12} {:>12} {:>8}",
                escape(&name),
                s.llm_calls,
                format!("{}/{}", human_count(s.input_tokens), human_count(s.output_tokens)),
                format!("${:.4}", s.billed_usd),
                format!("${:.4}", s.at_price_usd),
                percent(s.at_price_usd, s.billed_usd),
            );
        }
        if rows.len() > limit {
            let _ = writeln!(out, "  ... {} more (--limit)", rows.len() - limit);
        }
    }
    let _ = writeln!(out, "\ncaveats:");
    for c in r.caveats() {
        let _ = writeln!(out, "- {c}");
    }
    out
}

/// `report --digest day|week`: the last complete period (in `tz`) against
/// the one before it.
fn digest(store: &Reader, dir: &std::path::Path, args: &ReportArgs, tz: &TimeZone, period: &str) -> Result<i32> {
    let (period, days): (&'static str, i64) = if period == "week" { ("week", 7) } else { ("day", 1) };
    let now = hermes_meter_store::unix_now();
    let today = hermes_meter_model::budget::timestamp(now).to_zoned(tz.clone()).date();
    let midnight = |back: i64| -> Result<f64> {
        let date = today
            .checked_sub(jiff::Span::new().days(back))
            .map_err(|e| Error::Other(e.to_string()))?;
        let zoned = date.to_zoned(tz.clone()).map_err(|e| Error::Other(e.to_string()))?;
        Ok(zoned.timestamp().as_microsecond() as f64 / 1e6)
    };
    let (end, start, before) = (midnight(0)?, midnight(days)?, midnight(2 * days)?);
    let top = args.limit.clamp(1, 50);
    let every = if period == "week" { Every::Week } else { Every::Day };
    let built = hermes_meter_runtime::digest::build(store, dir, tz, every, (before, start, end), top, now)?;
    if args.json {
        let text = serde_json::to_string_pretty(&built.json()).map_err(|e| Error::Other(e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", hermes_meter_runtime::digest::render(&built));
    }
    Ok(0)
}

/// `to` against `from` as a signed percentage, or `-` when `from` is 0.
fn percent(to: f64, from: f64) -> String {
    if from > 0.0 {
        format!("{:+.0}%", 100.0 * (to - from) / from)
    } else {
        "-".to_string()
    }
}

/// Writes the report of `[since, until)` as JSON to `out`, its session
/// list straight from the statement that reads it (most of what a long
/// window prints: one sum a session, never all of them at once), then
/// flushes.
fn write_json(store: &Reader, tz: &TimeZone, since: f64, until: f64, out: &mut impl std::io::Write) -> Result<()> {
    let report = store
        .report_without_sessions(tz, since, until)?
        .with_sessions(SessionList {
            store,
            since,
            until,
            failed: std::cell::RefCell::new(None),
        });
    let written = serde_json::to_writer_pretty(&mut *out, &report)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out))
        .and_then(|()| out.flush());
    // A store error met while writing is the one to report, not the
    // serializer's word for it.
    if let Some(e) = report.by_session.failed.take() {
        return Err(e);
    }
    written.map_err(|e| Error::Other(format!("writing the report: {e}")))
}

/// `by_session`, serialized as the store hands it over, a session at a
/// time: the same JSON a `Vec<Group>` of it gives.
struct SessionList<'a> {
    store: &'a Reader,
    since: f64,
    until: f64,
    /// What reading the store failed with, if it did.
    failed: std::cell::RefCell<Option<Error>>,
}

impl serde::Serialize for SessionList<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeSeq as _};
        let mut seq = serializer.serialize_seq(None)?;
        let mut written = Ok(());
        let read = self
            .store
            .for_each_session_by_cost(self.since, self.until, |session, totals| {
                let group = Group {
                    key: Some(session.to_string()),
                    totals,
                };
                written = seq.serialize_element(&group);
                written
                    .as_ref()
                    .map_err(|_| Error::Other("writing the report stopped".into()))
                    .copied()
            });
        written?;
        if let Err(e) = read {
            let text = e.to_string();
            self.failed.replace(Some(e));
            return Err(S::Error::custom(text));
        }
        seq.end()
    }
}

/// The human form: a totals block and one table per grouping.
pub(super) fn render(r: &Report, limit: usize) -> String {
    let mut out = String::new();
    let t = &r.totals;
    // The unbounded window's ends are placeholders (the epoch, year
    // 9999); printing them reads like a bug, so name the window instead.
    let start = if r.since.starts_with("1970-01-01T00:00:00") {
        "the first event"
    } else {
        r.since.as_str()
    };
    let end = if r.until.starts_with("9999-") {
        "now"
    } else {
        r.until.as_str()
    };
    let _ = writeln!(out, "hermes-meter report  {start} .. {end}  (days in {})", r.timezone);
    let _ = writeln!(
        out,
        "total ${:.4}  sessions {}  llm calls {} ({} estimated, {} unpriced, {} auxiliary for ${:.4})  api errors {}  \
         tool calls {} ({} failed, {} of them a non-zero exit Hermes reported as ok)",
        t.cost_usd,
        t.sessions,
        t.llm_calls,
        t.estimated_llm_calls,
        t.unpriced_llm_calls,
        t.aux_llm_calls,
        t.aux_cost_usd,
        t.api_errors,
        t.tool_calls,
        t.tool_failures,
        t.tool_nonzero_exits
    );
    let _ = writeln!(
        out,
        "tokens: input {}  output {}  cache read {}  cache write {}  reasoning {}",
        t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens, t.reasoning_tokens
    );
    if let Some(rate) = r.cache.hit_rate.filter(|_| !r.cache.by_model.is_empty()) {
        let unpriced = match r.cache.unpriced_models {
            0 => String::new(),
            n => format!(" ({n} unpriced model(s) not counted)"),
        };
        let _ = writeln!(
            out,
            "cache: {:.1}% of input tokens read from the providers' caches, saving ${:.4} at the price table's rates{unpriced}",
            100.0 * rate,
            r.cache.saved_usd
        );
    }
    if r.held_llm_calls > 0 {
        let _ = writeln!(
            out,
            "held: {} llm calls reported usage beyond what any provider bills in one call; \
             they are recorded but cost nothing above and charge no budget \
             (`hermes-meter held list` shows them, `hermes-meter held confirm ID` bills a real one)",
            r.held_llm_calls
        );
    }
    for (title, groups) in [
        ("day", &r.by_day),
        ("model", &r.by_model),
        ("provider", &r.by_provider),
        ("sender", &r.by_sender),
        ("cron job", &r.by_cron_job),
        ("session", &r.by_session),
    ] {
        if groups.iter().all(|g| g.key.is_none()) {
            continue;
        }
        out.push('\n');
        // The human form's report holds only the sessions it shows.
        let total = if title == "session" {
            groups.len().max(usize::try_from(r.totals.sessions).unwrap_or(0))
        } else {
            groups.len()
        };
        table(&mut out, title, groups, total, limit);
    }
    if !r.provider_billed.is_empty() {
        out.push('\n');
        provider_billed(&mut out, &r.provider_billed);
    }
    if !r.cache.by_model.is_empty() {
        out.push('\n');
        cache_by_model(&mut out, &r.cache.by_model, limit);
    }
    for d in &r.downgraded {
        let _ = writeln!(
            out,
            "downgraded by a budget: {} LLM calls of {} sent to {}, ${:.4}",
            d.llm_calls,
            d.from.as_deref().unwrap_or("(unknown model)"),
            d.to,
            d.cost_usd
        );
    }
    out
}

/// The width of a `model` column holding `names`.
fn model_width(names: impl Iterator<Item = String>) -> usize {
    names
        .map(|n| n.chars().count())
        .chain(["model".len()])
        .max()
        .unwrap_or(5)
}

/// Each model's share of input from cache and what it saved.
fn cache_by_model(out: &mut String, rows: &[hermes_meter_model::report::CacheUse], limit: usize) {
    let name = |c: &hermes_meter_model::report::CacheUse| escape(c.key.as_deref().unwrap_or("-")).to_string();
    let width = model_width(rows.iter().map(name));
    let _ = writeln!(out, "cache by model:");
    let _ = writeln!(
        out,
        "{:<width$}  {:>8}  {:>12}  {:>12}  {:>10}",
        "model", "hit rate", "cache read", "cache write", "saved $"
    );
    for c in rows.iter().take(limit) {
        let _ = writeln!(
            out,
            "{:<width$}  {:>8}  {:>12}  {:>12}  {:>10}",
            name(c),
            c.hit_rate.map_or("-".to_string(), |h| format!("{:.1}%", 100.0 * h)),
            c.cache_read_tokens,
            c.cache_write_tokens,
            c.saved_usd.map_or("unpriced".to_string(), |v| format!("{v:.4}")),
        );
    }
}

/// The calls providers billed themselves against our estimate of them.
fn provider_billed(out: &mut String, rows: &[hermes_meter_model::report::ProviderBilled]) {
    let _ = writeln!(
        out,
        "billed by the provider (the cost above) vs the price table's estimate:"
    );
    let name = |r: &hermes_meter_model::report::ProviderBilled| {
        format!(
            "{} via {}",
            escape(r.model.as_deref().unwrap_or("-")),
            escape(r.provider.as_deref().unwrap_or("-"))
        )
    };
    let width = model_width(rows.iter().map(name));
    let _ = writeln!(
        out,
        "{:<width$}  {:>6}  {:>12}  {:>12}  {:>12}",
        "model", "calls", "billed $", "estimate $", "difference $"
    );
    for r in rows {
        let diff = r.billed_usd - r.estimate_usd;
        // Differences below a micro-dollar are float noise, not a disagreement.
        let shown = if diff.abs() < 1e-6 {
            "agree".to_string()
        } else {
            format!("{diff:+.6}")
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:>6}  {:>12.6}  {:>12.6}  {:>12}",
            name(r),
            r.llm_calls,
            r.billed_usd,
            r.estimate_usd,
            shown
        );
    }
}

fn table(out: &mut String, title: &str, groups: &[Group], total: usize, limit: usize) {
    let headers = [
        "cost $", "input", "output", "cache r", "cache w", "reason", "calls", "aux", "errors", "tools", "failed",
        "nonzero",
    ];
    let cells = |t: &Totals| {
        [
            format!("{:.4}", t.cost_usd),
            t.input_tokens.to_string(),
            t.output_tokens.to_string(),
            t.cache_read_tokens.to_string(),
            t.cache_write_tokens.to_string(),
            t.reasoning_tokens.to_string(),
            t.llm_calls.to_string(),
            t.aux_llm_calls.to_string(),
            t.api_errors.to_string(),
            t.tool_calls.to_string(),
            t.tool_failures.to_string(),
            t.tool_nonzero_exits.to_string(),
        ]
    };
    let shown: Vec<_> = groups.iter().take(limit).collect();
    // Keys are recorded text (ids, models, senders): escaped before they
    // are measured, so the columns line up with what is printed.
    let keys: Vec<_> = shown.iter().map(|g| escape(g.key.as_deref().unwrap_or("-"))).collect();
    let key_width = keys
        .iter()
        .map(|k| k.chars().count())
        .chain([title.len()])
        .max()
        .unwrap_or(0);
    let rows: Vec<[String; 12]> = shown.iter().map(|g| cells(&g.totals)).collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let _ = write!(out, "{title:<key_width$}");
    for (h, w) in headers.iter().zip(&widths) {
        let _ = write!(out, "  {h:>w$}");
    }
    out.push('\n');
    for (key, row) in keys.iter().zip(&rows) {
        let _ = write!(out, "{key:<key_width$}");
        for (c, w) in row.iter().zip(&widths) {
            let _ = write!(out, "  {c:>w$}");
        }
        out.push('\n');
    }
    if total > shown.len() {
        let _ = writeln!(out, "... {} more (--limit)", total - shown.len());
    }
}
