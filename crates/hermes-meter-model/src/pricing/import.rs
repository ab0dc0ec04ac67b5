//! Price lists published elsewhere, read into pricing-file entries, and
//! merged into a pricing file without touching what the user wrote.
//!
//! Two public formats are read:
//! - OpenRouter's model list (`GET https://openrouter.ai/api/v1/models`):
//!   `{"data": [{"id", "pricing": {"prompt", "completion",
//!   "input_cache_read", "input_cache_write", "internal_reasoning",
//!   "overrides"}}]}`, USD per token as decimal strings. These are
//!   OpenRouter's prices, so the entries are scoped to the provider
//!   `openrouter`. An override with `min_prompt_tokens` is a context tier:
//!   the whole request at its rates once the prompt reaches that many
//!   tokens (a rate it leaves out keeps the base one); the lowest one is
//!   imported, and why any other override is not is in the list's notes.
//! - LiteLLM's `model_prices_and_context_window.json`: `{"<id>":
//!   {"litellm_provider", "mode", "input_cost_per_token", ...}}`, USD per
//!   token as numbers, with context tiers as
//!   `input_cost_per_token_above_200k_tokens` and the like. Entries are
//!   scoped to their `litellm_provider`, the id without that provider's
//!   route prefix.
//!
//! Pure: text in, entries or text out.

use std::collections::BTreeMap;

use serde_json::Value;
use toml_edit::{DocumentMut, Item, Table};

use super::{ModelPrice, TierPrice};

/// The price lists [`parse`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenRouter,
    LiteLlm,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::OpenRouter => "OpenRouter /models",
            Format::LiteLlm => "LiteLLM model prices",
        }
    }
}

/// One model's price from a list, with the provider it is scoped to.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// `None`: for any provider (`[models]`).
    pub provider: Option<String>,
    pub model: String,
    pub price: ModelPrice,
}

/// What [`parse`] read: the entries and why others were left out.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceList {
    pub format: Format,
    pub entries: Vec<Imported>,
    /// `(id, reason)` of the models left out.
    pub skipped: Vec<(String, String)>,
    /// `(id, what)`: what of an imported model's price was not imported.
    pub notes: Vec<(String, String)>,
}

/// Reads an OpenRouter or LiteLLM price list, whichever `text` is.
pub fn parse(text: &str) -> Result<PriceList, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err("not a JSON object".into());
    };
    if let Some(data) = map.get("data") {
        let Value::Array(models) = data else {
            return Err("`data` is not a list (OpenRouter's /models)".into());
        };
        return Ok(openrouter(models));
    }
    if map
        .values()
        .any(|v| v.get("input_cost_per_token").is_some() || v.get("litellm_provider").is_some())
    {
        return Ok(litellm(&map));
    }
    Err(
        "neither OpenRouter's /models (a `data` list) nor LiteLLM's model prices (models with \
         `input_cost_per_token`)"
            .into(),
    )
}

/// USD per token (a number or a decimal string) as USD per million tokens,
/// rounded to 1e-9 so `0.000003` reads back as 3, not 2.9999999999999996.
fn per_million(value: Option<&Value>) -> Option<f64> {
    let per_token = match value? {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    let m = (per_token * 1e6 * 1e9).round() / 1e9;
    (m.is_finite() && m >= 0.0).then_some(m)
}

fn openrouter(models: &[Value]) -> PriceList {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    let mut notes = Vec::new();
    for m in models {
        let Some(id) = m.get("id").and_then(Value::as_str).filter(|id| !id.trim().is_empty()) else {
            continue;
        };
        let pricing = m.get("pricing");
        let rate = |key: &str| per_million(pricing.and_then(|p| p.get(key)));
        // "-1" marks a router whose price depends on where it sends the call.
        let (Some(input), Some(output)) = (rate("prompt"), rate("completion")) else {
            skipped.push((id.to_string(), "no fixed prompt and completion price".into()));
            continue;
        };
        let reasoning = rate("internal_reasoning").filter(|r| *r > 0.0 && *r != output);
        let mut price = ModelPrice {
            cache_read: rate("input_cache_read"),
            cache_write: rate("input_cache_write"),
            cache_write_1h: rate("input_cache_write_1h"),
            reasoning,
            ..ModelPrice::flat(input, output)
        };
        let overrides = pricing
            .and_then(|p| p.get("overrides"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let (tier, not_imported) = openrouter_tier(overrides);
        if let Some((at_least, tier)) = tier {
            // Ours is "a prompt over above_tokens"; theirs "at least".
            price.above_tokens = Some(at_least - 1);
            price.above = Some(tier);
        }
        for why in not_imported {
            notes.push((id.to_string(), why));
        }
        entries.push(Imported {
            provider: Some("openrouter".into()),
            model: id.to_string(),
            price,
        });
    }
    PriceList {
        format: Format::OpenRouter,
        entries,
        skipped,
        notes,
    }
}

/// The context tier among an OpenRouter model's `pricing.overrides`: the
/// override with the lowest `min_prompt_tokens` and a rate of its own, as
/// `(min_prompt_tokens, rates)`; and why each other override is not
/// imported (another prompt floor above it, or a condition other than the
/// prompt's size, which a pricing file cannot express).
fn openrouter_tier(overrides: &[Value]) -> (Option<(i64, TierPrice)>, Vec<String>) {
    let mut tiers: Vec<(i64, TierPrice)> = Vec::new();
    let mut not_imported = Vec::new();
    for o in overrides {
        let floor = match o.get("min_prompt_tokens") {
            Some(Value::Number(n)) => n.as_i64(),
            Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        let conditions: Vec<&str> = o
            .as_object()
            .map(|m| {
                m.keys()
                    .map(String::as_str)
                    .filter(|k| !RATE_KEYS.contains(k) && *k != "min_prompt_tokens")
                    .collect()
            })
            .unwrap_or_default();
        let rate = |key: &str| per_million(o.get(key));
        let tier = TierPrice {
            input: rate("prompt"),
            output: rate("completion"),
            cache_read: rate("input_cache_read"),
            cache_write: rate("input_cache_write"),
            cache_write_1h: rate("input_cache_write_1h"),
            reasoning: rate("internal_reasoning"),
        };
        match floor {
            Some(n) if n > 0 && conditions.is_empty() && tier != TierPrice::default() => tiers.push((n, tier)),
            Some(n) if n > 0 && conditions.is_empty() => {
                not_imported.push(format!("an override from {n} prompt tokens with no rate read"))
            }
            _ => not_imported.push(format!(
                "an override on {} is not a context tier; only the base price is imported for it",
                if conditions.is_empty() {
                    "no prompt size".to_string()
                } else {
                    conditions.join(", ")
                }
            )),
        }
    }
    tiers.sort_by_key(|(n, _)| *n);
    let mut tiers = tiers.into_iter();
    let lowest = tiers.next();
    for (n, _) in tiers {
        not_imported.push(format!(
            "its tier from {n} prompt tokens is not imported: a pricing file holds one tier, the lowest"
        ));
    }
    (lowest, not_imported)
}

/// The rates an OpenRouter price (or override) may carry.
const RATE_KEYS: &[&str] = &[
    "prompt",
    "completion",
    "input_cache_read",
    "input_cache_write",
    "input_cache_write_1h",
    "internal_reasoning",
    "request",
    "image",
    "web_search",
    "audio",
];

/// LiteLLM modes whose models bill chat tokens; embeddings, images, audio
/// and the like are priced per other units.
const TOKEN_MODES: &[&str] = &["chat", "completion", "responses"];

fn litellm(map: &serde_json::Map<String, Value>) -> PriceList {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for (key, m) in map {
        if key == "sample_spec" || !m.is_object() {
            continue;
        }
        let mode = m.get("mode").and_then(Value::as_str).unwrap_or("chat");
        if !TOKEN_MODES.contains(&mode) {
            skipped.push((key.clone(), format!("mode {mode}, not billed per chat token")));
            continue;
        }
        let rate = |k: &str| per_million(m.get(k));
        let (Some(input), Some(output)) = (rate("input_cost_per_token"), rate("output_cost_per_token")) else {
            skipped.push((key.clone(), "no input and output price per token".into()));
            continue;
        };
        let provider = m
            .get("litellm_provider")
            .and_then(Value::as_str)
            .map(|p| p.trim().to_ascii_lowercase())
            .filter(|p| !p.is_empty());
        let model = match &provider {
            Some(p) => key.strip_prefix(&format!("{p}/")).unwrap_or(key),
            None => key,
        };
        let mut price = ModelPrice {
            cache_read: rate("cache_read_input_token_cost"),
            cache_write: rate("cache_creation_input_token_cost"),
            cache_write_1h: rate("cache_creation_input_token_cost_above_1hr"),
            reasoning: rate("output_cost_per_reasoning_token").filter(|r| *r != output),
            ..ModelPrice::flat(input, output)
        };
        if let Some(tokens) = lowest_tier(m) {
            let suffix = format!("_above_{}k_tokens", tokens / 1000);
            let tier = TierPrice {
                input: rate(&format!("input_cost_per_token{suffix}")),
                output: rate(&format!("output_cost_per_token{suffix}")),
                cache_read: rate(&format!("cache_read_input_token_cost{suffix}")),
                cache_write: rate(&format!("cache_creation_input_token_cost{suffix}")),
                cache_write_1h: None,
                reasoning: None,
            };
            if tier != TierPrice::default() {
                price.above_tokens = Some(tokens);
                price.above = Some(tier);
            }
        }
        entries.push(Imported {
            provider,
            model: model.to_string(),
            price,
        });
    }
    PriceList {
        format: Format::LiteLlm,
        entries,
        skipped,
        notes: Vec::new(),
    }
}

/// The lowest context tier a LiteLLM entry prices (`*_above_128k_tokens`),
/// in tokens. The pricing file holds one tier a model; the lowest is the
/// one a long request reaches first.
fn lowest_tier(m: &Value) -> Option<i64> {
    let obj = m.as_object()?;
    obj.keys()
        .filter_map(|k| {
            let rest = k.split_once("_above_")?.1;
            let n = rest.strip_suffix("k_tokens")?.parse::<i64>().ok()?;
            (n > 0).then_some(n * 1000)
        })
        .min()
}

/// How [`merge`] changed a pricing file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    pub added: usize,
    pub changed: usize,
    pub unchanged: usize,
}

/// Writes `entries` into the pricing file `doc`: new models are added,
/// models whose price differs are replaced, everything else in the file
/// (the user's own entries, comments, `[defaults]`) stays as it was.
pub fn merge(doc: &mut DocumentMut, entries: &[Imported], dated: Option<(&str, f64)>) -> Merged {
    let mut merged = Merged::default();
    // Sorted, so the file reads in order and a diff is stable.
    let mut sorted: BTreeMap<(Option<&str>, &str), &ModelPrice> = BTreeMap::new();
    for e in entries {
        sorted.insert((e.provider.as_deref(), e.model.as_str()), &e.price);
    }
    for ((provider, model), price) in sorted {
        let models = models_table(doc, provider);
        let existing = models.get(model).and_then(read_price);
        match existing {
            Some((_, in_force)) if in_force == *price => merged.unchanged += 1,
            // New rates of the same shape: a dated change, so the calls
            // before it keep the rates they were billed at.
            Some((_, in_force))
                if dated.is_some()
                    && (in_force.above_tokens, in_force.above) == (price.above_tokens, price.above)
                    && models.get(model).is_some_and(Item::is_table) =>
            {
                let (date, _) = dated.unwrap_or_default();
                let entry = models[model].as_table_mut().expect("checked a table");
                add_change(entry, date, &in_force, price);
                merged.changed += 1;
            }
            Some(_) => {
                models.insert(model, Item::Table(price_table(price)));
                merged.changed += 1;
            }
            None => {
                models.insert(model, Item::Table(price_table(price)));
                merged.added += 1;
            }
        }
    }
    merged
}

/// `[models]` or `[providers.<p>.models]`, made (implicitly) when missing.
fn models_table<'d>(doc: &'d mut DocumentMut, provider: Option<&str>) -> &'d mut Table {
    fn child<'t>(t: &'t mut Table, key: &str) -> &'t mut Table {
        if !t.get(key).is_some_and(Item::is_table) {
            let mut new = Table::new();
            new.set_implicit(true);
            t.insert(key, Item::Table(new));
        }
        t[key].as_table_mut().expect("just made a table")
    }
    let root = doc.as_table_mut();
    match provider {
        None => child(root, "models"),
        Some(p) => child(child(child(root, "providers"), p), "models"),
    }
}

/// A price as the pricing file spells it; rates left out are not written.
fn price_table(p: &ModelPrice) -> Table {
    let mut t = Table::new();
    t.insert("input", toml_edit::value(p.input));
    t.insert("output", toml_edit::value(p.output));
    for (key, rate) in [
        ("cache_read", p.cache_read),
        ("cache_write", p.cache_write),
        ("cache_write_1h", p.cache_write_1h),
        ("reasoning", p.reasoning),
    ] {
        if let Some(r) = rate {
            t.insert(key, toml_edit::value(r));
        }
    }
    if let (Some(n), Some(tier)) = (p.above_tokens, p.above) {
        t.insert("above_tokens", toml_edit::value(n));
        let mut above = toml_edit::InlineTable::new();
        for (key, rate) in [
            ("input", tier.input),
            ("output", tier.output),
            ("cache_read", tier.cache_read),
            ("cache_write", tier.cache_write),
            ("cache_write_1h", tier.cache_write_1h),
            ("reasoning", tier.reasoning),
        ] {
            if let Some(r) = rate {
                above.insert(key, r.into());
            }
        }
        t.insert("above", toml_edit::value(above));
    }
    t
}

/// The price an existing entry of the file says, if it reads as one.
/// An entry's base rates and the rates in force (its dated changes up to
/// `now` applied); `None` for an entry that does not parse.
fn read_price(item: &Item) -> Option<(ModelPrice, ModelPrice)> {
    let text = match item {
        Item::Table(t) => format!("[p]\n{t}"),
        Item::Value(v) => format!("p = {v}"),
        _ => return None,
    };
    let mut map: toml::Table = toml::from_str(&text).ok()?;
    let toml::Value::Table(mut entry) = map.remove("p")? else {
        return None;
    };
    let schedule = super::dated::take_schedule(&mut entry, "entry").ok()?;
    let base: ModelPrice = toml::Value::Table(entry).try_into().ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Some((base, super::dated::with_changes(&schedule, base, now)))
}

/// Appends to `entry`'s `changes` the rates of `price` that differ from
/// `in_force`, from `date` on.
fn add_change(entry: &mut Table, date: &str, in_force: &ModelPrice, price: &ModelPrice) {
    let mut change = toml_edit::InlineTable::new();
    change.insert("from", date.into());
    let pairs = [
        ("input", Some(in_force.input), Some(price.input)),
        ("output", Some(in_force.output), Some(price.output)),
        ("cache_read", in_force.cache_read, price.cache_read),
        ("cache_write", in_force.cache_write, price.cache_write),
        ("cache_write_1h", in_force.cache_write_1h, price.cache_write_1h),
        ("reasoning", in_force.reasoning, price.reasoning),
    ];
    for (key, old, new) in pairs {
        if let Some(n) = new.filter(|n| old != Some(*n)) {
            change.insert(key, n.into());
        }
    }
    let changes = entry
        .entry("changes")
        .or_insert(toml_edit::value(toml_edit::Array::new()));
    if let Some(list) = changes.as_array_mut() {
        list.push(change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::PriceTable;

    const OPENROUTER: &str = r#"{"data": [
        {"id": "anthropic/claude-sonnet-4.5", "pricing": {"prompt": "0.000003", "completion": "0.000015",
         "input_cache_read": "0.0000003", "input_cache_write": "0.00000375", "internal_reasoning": "0"}},
        {"id": "openrouter/auto", "pricing": {"prompt": "-1", "completion": "-1"}},
        {"id": "deepseek/deepseek-r1", "pricing": {"prompt": "0.0000004", "completion": "0.000002",
         "internal_reasoning": "0.000003"}},
        {"id": "meta-llama/llama-3.3-70b-instruct:free", "pricing": {"prompt": "0", "completion": "0"}}
    ]}"#;

    const LITELLM: &str = r#"{
        "sample_spec": {"input_cost_per_token": 0, "litellm_provider": "one of ..."},
        "gemini/gemini-2.5-pro": {"litellm_provider": "gemini", "mode": "chat",
            "input_cost_per_token": 1.25e-06, "output_cost_per_token": 1e-05,
            "cache_read_input_token_cost": 3.125e-07,
            "input_cost_per_token_above_200k_tokens": 2.5e-06, "output_cost_per_token_above_200k_tokens": 1.5e-05},
        "gpt-4o": {"litellm_provider": "openai", "mode": "chat",
            "input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05, "cache_read_input_token_cost": 1.25e-06},
        "text-embedding-3-small": {"litellm_provider": "openai", "mode": "embedding", "input_cost_per_token": 2e-08,
            "output_cost_per_token": 0}
    }"#;

    #[test]
    fn openrouter_lists_become_entries_scoped_to_openrouter() {
        let list = parse(OPENROUTER).expect("parses");
        assert_eq!(list.format, Format::OpenRouter);
        let ids: Vec<_> = list.entries.iter().map(|e| e.model.as_str()).collect();
        assert_eq!(
            ids,
            [
                "anthropic/claude-sonnet-4.5",
                "deepseek/deepseek-r1",
                "meta-llama/llama-3.3-70b-instruct:free"
            ]
        );
        let sonnet = &list.entries[0];
        assert_eq!(sonnet.provider.as_deref(), Some("openrouter"));
        assert_eq!(
            sonnet.price,
            ModelPrice {
                cache_read: Some(0.3),
                cache_write: Some(3.75),
                ..ModelPrice::flat(3.0, 15.0)
            }
        );
        assert_eq!(list.entries[1].price.reasoning, Some(3.0));
        assert_eq!(
            list.skipped,
            [(
                "openrouter/auto".to_string(),
                "no fixed prompt and completion price".into()
            )]
        );
    }

    /// OpenRouter's model list with its long-context overrides (#109976):
    /// at 272k prompt tokens and above, prompt and cache reads x2 and
    /// completion x1.5, the rest at the base rate; an override on another
    /// condition and a second floor beside.
    const OPENROUTER_OVERRIDES: &str = r#"{"data": [
        {"id": "openai/gpt-5.5", "context_length": 1050000, "pricing": {
         "prompt": "0.000005", "completion": "0.00003", "input_cache_read": "0.0000005",
         "input_cache_write": "0.00000625", "request": "0", "image": "0",
         "overrides": [{"min_prompt_tokens": 272000, "prompt": "0.00001", "completion": "0.000045",
                        "input_cache_read": "0.000001"}]}},
        {"id": "vendor/two-floors", "pricing": {"prompt": "0.000001", "completion": "0.000002",
         "overrides": [{"min_prompt_tokens": "1000000", "prompt": "0.000004"},
                       {"min_prompt_tokens": 128000, "prompt": "0.000002"},
                       {"time_of_day": "off-peak", "prompt": "0.0000005"}]}}
    ]}"#;

    #[test]
    fn openrouter_override_tiers_become_context_tiers_at_the_same_threshold() {
        let list = parse(OPENROUTER_OVERRIDES).expect("parses");
        let gpt = list
            .entries
            .iter()
            .find(|e| e.model == "openai/gpt-5.5")
            .expect("gpt-5.5");
        assert_eq!(gpt.price.above_tokens, Some(271_999));
        let tier = gpt.price.above.expect("tier");
        assert_eq!(
            (tier.input, tier.output, tier.cache_read, tier.cache_write),
            (Some(10.0), Some(45.0), Some(1.0), None)
        );
        // Billed as OpenRouter bills: the whole request at the tier from
        // 272,000 prompt tokens on; the cache write keeps its base rate.
        let mut doc = DocumentMut::new();
        merge(&mut doc, &list.entries, None);
        let mut table = PriceTable::default();
        table
            .add_user_prices(&doc.to_string(), std::path::Path::new("pricing.toml"))
            .expect("reads back");
        let cost = |prompt: i64| {
            let usage = crate::hook::Usage {
                input_tokens: prompt - 1000,
                cache_write_tokens: 1000,
                output_tokens: 1_000_000,
                ..Default::default()
            };
            table.cost("openai/gpt-5.5", Some("openrouter"), &usage, 0.0).usd
        };
        let at = |input: f64, write: f64, output: f64, prompt: i64| {
            ((prompt - 1000) as f64 * input + 1000.0 * write + 1e6 * output) / 1e6
        };
        assert!((cost(271_999) - at(5.0, 6.25, 30.0, 271_999)).abs() < 1e-9);
        assert!((cost(272_000) - at(10.0, 6.25, 45.0, 272_000)).abs() < 1e-9);
        // The lowest floor is the tier; the higher one and the override on
        // another condition are said, not dropped silently.
        let two = list
            .entries
            .iter()
            .find(|e| e.model == "vendor/two-floors")
            .expect("entry");
        assert_eq!(two.price.above_tokens, Some(127_999));
        assert_eq!(two.price.above.and_then(|t| t.input), Some(2.0));
        let said: Vec<&str> = list
            .notes
            .iter()
            .filter(|(id, _)| id == "vendor/two-floors")
            .map(|(_, why)| why.as_str())
            .collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said.iter().any(|w| w.contains("time_of_day")), "{said:?}");
        assert!(said.iter().any(|w| w.contains("1000000")), "{said:?}");
        assert!(list.skipped.is_empty() && !list.notes.iter().any(|(id, _)| id == "openai/gpt-5.5"));
    }

    #[test]
    fn litellm_lists_keep_tiers_and_leave_other_modes_out() {
        let list = parse(LITELLM).expect("parses");
        assert_eq!(list.format, Format::LiteLlm);
        let gemini = list
            .entries
            .iter()
            .find(|e| e.model == "gemini-2.5-pro")
            .expect("gemini");
        assert_eq!(gemini.provider.as_deref(), Some("gemini"));
        assert_eq!(gemini.price.above_tokens, Some(200_000));
        let tier = gemini.price.above.expect("tier");
        assert_eq!(
            (tier.input, tier.output, tier.cache_read),
            (Some(2.5), Some(15.0), None)
        );
        assert_eq!(gemini.price.cache_read, Some(0.3125));
        assert!(list
            .entries
            .iter()
            .any(|e| e.model == "gpt-4o" && e.provider.as_deref() == Some("openai")));
        assert!(list
            .skipped
            .iter()
            .any(|(id, why)| id == "text-embedding-3-small" && why.contains("embedding")));
    }

    #[test]
    fn anything_else_is_refused_with_what_was_expected() {
        for bad in ["", "[]", "{\"data\": 3}", "{\"a\": 1}"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn merging_keeps_the_users_file_and_reports_what_changed() {
        let user = "# my prices\n[defaults]\ncache_read_fraction = 0.2\n\n[models.mine]\ninput = 1.0\noutput = 2.0\n\n\
                    [providers.openrouter.models.\"deepseek/deepseek-r1\"]\ninput = 0.4\noutput = 2.0\nreasoning = 3.0\n";
        let mut doc: DocumentMut = user.parse().expect("toml");
        let list = parse(OPENROUTER).expect("parses");
        let merged = merge(&mut doc, &list.entries, None);
        assert_eq!(
            merged,
            Merged {
                added: 2,
                changed: 0,
                unchanged: 1
            }
        );
        let text = doc.to_string();
        assert!(
            text.starts_with("# my prices\n[defaults]\ncache_read_fraction = 0.2\n"),
            "{text}"
        );
        // The result is a pricing file that prices the imported models.
        let mut table = PriceTable::default();
        table
            .add_user_prices(&text, std::path::Path::new("pricing.toml"))
            .expect("valid pricing file");
        let (price, _) = table.lookup("anthropic/claude-sonnet-4.5", Some("openrouter"));
        assert_eq!(price.map(|p| (p.input, p.cache_write)), Some((3.0, Some(3.75))));
        assert_eq!(table.lookup("mine", None).0.map(|p| p.input), Some(1.0));
        // Again: nothing to do. A changed price replaces the entry.
        assert_eq!(merge(&mut doc, &list.entries, None).unchanged, 3);
        let mut cheaper = list.entries.clone();
        cheaper[0].price.input = 2.0;
        assert_eq!(merge(&mut doc, &cheaper, None).changed, 1);
        // Dated: the change is a row from that date, the entry's rates stay
        // for what came before, and the same list again changes nothing.
        let mut dearer = cheaper.clone();
        dearer[0].price.input = 6.0;
        dearer[0].price.output = 30.0;
        let from = "2026-12-07";
        let at = 1_796_601_600.0; // 2026-12-07T00:00:00Z
        assert_eq!(merge(&mut doc, &dearer, Some((from, at))).changed, 1);
        let text = doc.to_string();
        assert!(
            text.contains("changes = [{ from = \"2026-12-07\", input = 6.0, output = 30.0 }]"),
            "{text}"
        );
        assert_eq!(
            merge(&mut doc, &dearer, Some((from, at))).changed,
            0,
            "in force already"
        );
        let mut table = PriceTable::default();
        table
            .add_user_prices(&text, std::path::Path::new("pricing.toml"))
            .expect("valid pricing file");
        let million = crate::hook::Usage {
            input_tokens: 1_000_000,
            ..Default::default()
        };
        let model = &dearer[0].model;
        assert_eq!(table.cost(model, Some("openrouter"), &million, at - 1.0).usd, 2.0);
        assert_eq!(table.cost(model, Some("openrouter"), &million, at).usd, 6.0);
        // Tiers survive the round trip through the file.
        let mut doc = DocumentMut::new();
        let gemini = parse(LITELLM).expect("parses").entries;
        merge(&mut doc, &gemini, None);
        let mut table = PriceTable::default();
        table
            .add_user_prices(&doc.to_string(), std::path::Path::new("pricing.toml"))
            .expect("valid pricing file");
        let (price, _) = table.lookup("gemini-2.5-pro", Some("gemini"));
        assert_eq!(price.and_then(|p| p.above).and_then(|t| t.input), Some(2.5));
        assert_eq!(merge(&mut doc, &gemini, None).unchanged, gemini.len());
    }
}
