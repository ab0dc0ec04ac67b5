//! The price table and the cost of an LLM call.
//!
//! Owns: the built-in prices, the user's pricing file format, model-id
//! matching and the cost formula. Pure: the runtime reads the user's file
//! and hands its text to [`PriceTable::add_user_prices`].
//!
//! # The pricing file
//!
//! TOML, USD per **million** tokens, one table per model id or id prefix:
//!
//! ```toml
//! [models."anthropic/claude-sonnet-4"]
//! input = 3.0
//! output = 15.0
//! cache_read = 0.30    # optional, default input × cache_read_fraction
//! cache_write = 3.75   # optional, default input × cache_write_fraction
//! reasoning = 15.0     # optional, only where reasoning is priced apart from output
//!
//! [models."gemini-2.5-pro"]
//! input = 1.25
//! output = 10.0
//! # A context tier: a request whose prompt (input + cache reads + cache
//! # writes) exceeds `above_tokens` bills ALL its tokens at these rates, as
//! # Google and Anthropic bill long contexts. A rate left out keeps the base one.
//! above_tokens = 200000
//! above = { input = 2.5, output = 15.0 }
//!
//! # Prices that apply only when Hermes's `provider` is this one (the same
//! # model id can cost more through a router than direct).
//! [providers.openrouter.models."anthropic/claude-sonnet-4"]
//! input = 3.3
//! output = 16.5
//!
//! [defaults]           # optional
//! cache_read_fraction = 0.1
//! cache_write_fraction = 1.25
//! ```
//!
//! Matching is case-insensitive, treats `.` and `-` alike (so
//! `claude-sonnet-4.5` and `claude-sonnet-4-5` are one model), and takes the
//! longest key that is a prefix of the model id, first of the whole id, then
//! of the id without its `vendor/` route. The order: the user's entries for
//! the call's provider, the user's entries for any provider, the built-in
//! table, then the price Hermes itself knows. An id ending in `:free` costs
//! 0. An unknown model costs 0 and is flagged [`PriceSource::Unknown`], never
//! silently.
//!
//! A cost the provider reported itself (OpenRouter's `usage.cost`) wins over
//! any table: see [`PriceTable::bill`].

mod dated;
mod defaults;
pub mod import;
mod provider;

use defaults::Defaults;
pub use provider::{provider_bill, PROVIDER_FIGURES};

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::hook::Usage;
use crate::Invalid;

/// Default price of a cache read, as a fraction of the input price, when a
/// model gives none (Anthropic and recent OpenAI models charge 0.1×).
pub(crate) const DEFAULT_CACHE_READ_FRACTION: f64 = 0.1;
/// Default price of a cache write, as a fraction of the input price, when a
/// model gives none (Anthropic's five-minute cache charges 1.25×).
pub(crate) const DEFAULT_CACHE_WRITE_FRACTION: f64 = 1.25;
/// Default price of a one-hour cache write, as a fraction of the input
/// price, when a model gives none (Anthropic's one-hour cache charges 2×).
pub(crate) const DEFAULT_CACHE_WRITE_1H_FRACTION: f64 = 2.0;

/// The stored spelling of [`PriceSource::Held`] (`llm_calls.cost_source`,
/// which the store's `llm_calls_held` index selects on).
pub const HELD: &str = "held";

/// The stored spelling of [`PriceSource::Upstream`]; with `provider`, the
/// sources whose cost the provider reported (`report`'s provider-billed
/// table reads both).
pub const UPSTREAM: &str = "provider_upstream";

/// Where a cost came from. Stored with every cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceSource {
    /// The provider's own figure for the call (OpenRouter's `usage.cost`).
    Provider,
    /// The charge of the provider behind a gateway, as the gateway reported
    /// it (`usage.cost_details.upstream_inference_cost`), with the
    /// gateway's fee for a call on the user's own key: see
    /// [`PriceTable::bill`].
    Upstream,
    /// The user's pricing file.
    User,
    /// The table built into hermes-meter.
    Builtin,
    /// The price Hermes itself knows for the model (set by the binding).
    Host,
    /// A `:free` model id.
    Free,
    /// No price known: the cost is recorded as 0 and flagged.
    Unknown,
    /// The call's usage is beyond what any provider bills in one call
    /// ([`usage_beyond_bounds`]): a bogus figure, not a bill. The call is
    /// recorded with its figures (the price table's estimate kept beside
    /// it) at a cost of 0, so it charges no budget and adds to no cost
    /// total, and is counted as held by `report` and `status`.
    Held,
}

/// The most tokens of one kind (input, output, cache read, cache write,
/// reasoning) one call is billed for. The largest context windows offered
/// in 2026 are 10 M tokens and the largest outputs well under 1 M; 50 M
/// leaves five times the largest window, so a real call is never held.
/// A provider's or a proxy's bogus figure (10^30, cut to 10^12 by the
/// decoder) is far beyond it.
pub(crate) const MAX_TOKENS_PER_CALL: i64 = 50_000_000;

/// The most a provider's own figure for one call (`usage.cost`) can be,
/// USD. 10 M input tokens at the dearest list price of 2026 ($150 per
/// million) and 1 M output at $600 come to $2,100; $10,000 leaves room for
/// prices to come, while one bogus figure ($22 M was seen) is held.
pub(crate) const MAX_USD_PER_CALL: f64 = 10_000.0;

/// Whether `usage` is beyond what any provider bills in one call (see
/// [`MAX_TOKENS_PER_CALL`], [`MAX_USD_PER_CALL`]).
pub fn usage_beyond_bounds(usage: &Usage) -> bool {
    let tokens = [
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
    ];
    tokens
        .iter()
        .chain(usage.prompt_tokens.iter())
        .any(|&n| n > MAX_TOKENS_PER_CALL)
        || usage.provider_cost_usd.is_some_and(|usd| usd > MAX_USD_PER_CALL)
        || usage.provider_upstream_usd.is_some_and(|usd| usd > MAX_USD_PER_CALL)
}

impl PriceSource {
    /// The stored and exported spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PriceSource::Provider => "provider",
            PriceSource::Upstream => UPSTREAM,
            PriceSource::User => "user",
            PriceSource::Builtin => "builtin",
            PriceSource::Host => "host",
            PriceSource::Free => "free",
            PriceSource::Unknown => "unknown",
            PriceSource::Held => HELD,
        }
    }
}

/// Prices of one model, USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input: f64,
    pub output: f64,
    pub cache_read: Option<f64>,
    /// A cache write with the five-minute lifetime, and any write whose
    /// lifetime the provider does not say.
    pub cache_write: Option<f64>,
    /// A cache write with the one-hour lifetime, where the provider says
    /// which it billed (Anthropic's `cache_creation.ephemeral_1h_input_tokens`).
    pub cache_write_1h: Option<f64>,
    /// Only for models that price reasoning apart from other output.
    pub reasoning: Option<f64>,
    /// The prompt size above which [`ModelPrice::above`] applies.
    pub above_tokens: Option<i64>,
    /// The rates of a whole request whose prompt exceeds `above_tokens`.
    pub above: Option<TierPrice>,
}

impl ModelPrice {
    /// Plain input and output prices, nothing else.
    pub const fn flat(input: f64, output: f64) -> Self {
        ModelPrice {
            input,
            output,
            cache_read: None,
            cache_write: None,
            cache_write_1h: None,
            reasoning: None,
            above_tokens: None,
            above: None,
        }
    }

    /// Every rate in the entry, for validation.
    fn rates(&self) -> impl Iterator<Item = f64> {
        let tier = self.above.unwrap_or_default();
        [self.input, self.output]
            .into_iter()
            .chain(
                [self.cache_read, self.cache_write, self.cache_write_1h, self.reasoning]
                    .into_iter()
                    .flatten(),
            )
            .chain(
                [
                    tier.input,
                    tier.output,
                    tier.cache_read,
                    tier.cache_write,
                    tier.cache_write_1h,
                    tier.reasoning,
                ]
                .into_iter()
                .flatten(),
            )
    }

    /// The rates that bill a request whose prompt is `prompt_tokens` long.
    pub fn for_prompt(&self, prompt_tokens: i64) -> ModelPrice {
        match (self.above_tokens, self.above) {
            (Some(limit), Some(t)) if prompt_tokens > limit => ModelPrice {
                input: t.input.unwrap_or(self.input),
                output: t.output.unwrap_or(self.output),
                cache_read: t.cache_read.or(self.cache_read),
                cache_write: t.cache_write.or(self.cache_write),
                cache_write_1h: t.cache_write_1h.or(self.cache_write_1h),
                reasoning: t.reasoning.or(self.reasoning),
                above_tokens: None,
                above: None,
            },
            _ => *self,
        }
    }
}

/// The rates above a context tier; a rate left out keeps the base one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierPrice {
    pub input: Option<f64>,
    pub output: Option<f64>,
    pub cache_read: Option<f64>,
    pub cache_write: Option<f64>,
    #[serde(default)]
    pub cache_write_1h: Option<f64>,
    pub reasoning: Option<f64>,
}

/// A cost with its provenance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub usd: f64,
    pub source: PriceSource,
}

/// What a call is billed: the provider's figure when it reported one,
/// else the table's; the table's estimate is kept beside it either way so
/// the two can be reconciled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bill {
    pub cost: Cost,
    pub estimate: Cost,
}

/// Which entry priced a model, for `pricing show`.
#[derive(Debug, Clone, PartialEq)]
pub struct Match {
    pub price: Option<ModelPrice>,
    pub source: PriceSource,
    /// The key that matched (normalized), if a table entry did.
    pub key: Option<String>,
    /// The provider the entry is scoped to, if it is.
    pub provider: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PricingFile {
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    models: BTreeMap<String, ModelPrice>,
    #[serde(default)]
    providers: BTreeMap<String, ProviderPrices>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderPrices {
    #[serde(default)]
    models: BTreeMap<String, ModelPrice>,
}

/// Normalized (key, price) entries, searched by longest prefix.
type Entries = Vec<(String, ModelPrice)>;

/// User prices over built-in ones, with host prices as a fallback.
#[derive(Debug, Clone)]
pub struct PriceTable {
    defaults: Defaults,
    /// The user's entries scoped to a provider (lowercased name).
    user_scoped: BTreeMap<String, Entries>,
    user: Entries,
    /// The built-in entries scoped to a provider (lowercased name).
    builtin_scoped: BTreeMap<String, Entries>,
    builtin: Entries,
    host: BTreeMap<String, ModelPrice>,
    /// The user's entries' dated changes and priced hours.
    schedules: dated::Schedules,
}

/// A built-in row as a normalized entry.
fn builtin_entry((id, input, output, cache_read): &(&str, f64, f64, Option<f64>)) -> (String, ModelPrice) {
    let price = ModelPrice {
        cache_read: *cache_read,
        ..ModelPrice::flat(*input, *output)
    };
    (normalize(id), price)
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable {
            defaults: Defaults::default(),
            user_scoped: BTreeMap::new(),
            user: Vec::new(),
            builtin_scoped: BUILTIN_SCOPED
                .iter()
                .map(|(provider, rows)| (provider.to_string(), rows.iter().map(builtin_entry).collect()))
                .collect(),
            builtin: BUILTIN.iter().map(builtin_entry).collect(),
            host: BTreeMap::new(),
            schedules: dated::Schedules::new(),
        }
    }
}

impl PriceTable {
    /// Adds the entries of a pricing file's text (see the module docs).
    pub fn add_user_prices(&mut self, text: &str, path: &Path) -> Result<(), Invalid> {
        let (text, schedules) = dated::take(text, path, normalize)?;
        let file: PricingFile = toml::from_str(&text).map_err(|e| Invalid {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })?;
        let invalid = |message: String| Invalid {
            path: path.to_path_buf(),
            message,
        };
        let scoped = file
            .providers
            .iter()
            .flat_map(|(p, prices)| prices.models.iter().map(move |(id, price)| (Some(p), id, price)));
        for (provider, id, price) in file.models.iter().map(|(id, p)| (None, id, p)).chain(scoped) {
            let name = match provider {
                Some(p) => format!("provider {p:?} model {id:?}"),
                None => format!("model {id:?}"),
            };
            if price.rates().any(|p| !p.is_finite() || p < 0.0) {
                return Err(invalid(format!("{name}: prices must be finite and not negative")));
            }
            match (price.above_tokens, price.above) {
                (Some(n), Some(_)) if n > 0 => {}
                (None, None) => {}
                _ => {
                    return Err(invalid(format!(
                        "{name}: a tier needs both `above_tokens` (a positive token count) and `above`"
                    )))
                }
            }
        }
        let entries = |models: BTreeMap<String, ModelPrice>| -> Entries {
            models.into_iter().map(|(k, v)| (normalize(&k), v)).collect()
        };
        self.defaults = file.defaults;
        self.schedules = schedules;
        self.user = entries(file.models);
        self.user_scoped = file
            .providers
            .into_iter()
            .map(|(p, prices)| (p.trim().to_ascii_lowercase(), entries(prices.models)))
            .collect();
        Ok(())
    }

    /// Records the price Hermes knows for a model, used when neither the
    /// user's file nor the built-in table has it.
    pub fn set_host_price(&mut self, model: &str, price: ModelPrice) {
        self.host.insert(normalize(model), price);
    }

    /// Whether any price is known for `model` without asking the host.
    pub fn knows(&self, model: &str, provider: Option<&str>) -> bool {
        !matches!(
            self.find(model, provider).source,
            PriceSource::Unknown | PriceSource::Host
        )
    }

    /// The price of `model` through `provider` and where it came from.
    pub fn lookup(&self, model: &str, provider: Option<&str>) -> (Option<ModelPrice>, PriceSource) {
        let m = self.find(model, provider);
        (m.price, m.source)
    }

    /// The entry that prices `model` through `provider`, with its key.
    pub fn find(&self, model: &str, provider: Option<&str>) -> Match {
        let id = normalize(model);
        let none = |source| Match {
            price: None,
            source,
            key: None,
            provider: None,
        };
        if id.ends_with(":free") {
            return none(PriceSource::Free);
        }
        let short = id.rsplit('/').next().unwrap_or(&id);
        let provider = provider.map(|p| p.trim().to_ascii_lowercase());
        fn scoped<'t>(
            tables: &'t BTreeMap<String, Entries>,
            provider: Option<&String>,
            source: PriceSource,
        ) -> Option<(&'t Entries, PriceSource, Option<&'t String>)> {
            let (p, entries) = tables.get_key_value(provider?)?;
            Some((entries, source, Some(p)))
        }
        let tables = scoped(&self.user_scoped, provider.as_ref(), PriceSource::User)
            .into_iter()
            .chain([(&self.user, PriceSource::User, None)])
            .chain(scoped(&self.builtin_scoped, provider.as_ref(), PriceSource::Builtin))
            .chain([(&self.builtin, PriceSource::Builtin, None)]);
        for (entries, source, scope) in tables {
            if let Some((key, price)) = longest_prefix(entries, &id).or_else(|| longest_prefix(entries, short)) {
                return Match {
                    price: Some(price),
                    source,
                    key: Some(key.to_string()),
                    provider: scope.cloned(),
                };
            }
        }
        if let Some((key, price)) = self.host.get_key_value(&id).or_else(|| self.host.get_key_value(short)) {
            return Match {
                price: Some(*price),
                source: PriceSource::Host,
                key: Some(key.clone()),
                provider: None,
            };
        }
        none(PriceSource::Unknown)
    }

    /// The table's cost of one call of `model` through `provider`.
    ///
    /// input·p_in + output·p_out + cache_read·p_cache_read +
    /// cache_write·p_cache_write, at the tier's rates when the prompt
    /// (input + cache reads + cache writes) exceeds the entry's
    /// `above_tokens`. Reasoning tokens are part of Hermes's output count,
    /// so they cost extra only where the model prices them apart: then they
    /// move from the output price to the reasoning price. `prompt_tokens`
    /// and `total_tokens` are never added in.
    pub fn cost(&self, model: &str, provider: Option<&str>, usage: &Usage, at: f64) -> Cost {
        let (price, source) = self.lookup_at(model, provider, at);
        let Some(p) = price else {
            return Cost { usd: 0.0, source };
        };
        let prompt = usage
            .input_tokens
            .saturating_add(usage.cache_read_tokens)
            .saturating_add(usage.cache_write_tokens);
        let p = self.resolved(&p.for_prompt(prompt));
        let (cache_read, cache_write) = (p.cache_read.unwrap_or(0.0), p.cache_write.unwrap_or(0.0));
        // Writes the provider said it kept an hour, at that rate; the rest
        // (five-minute writes, and writes whose lifetime it did not say)
        // at the five-minute rate.
        let write_1h = usage.cache_write_1h_tokens.clamp(0, usage.cache_write_tokens);
        let write_5m = usage.cache_write_tokens - write_1h;
        let reasoning = usage.reasoning_tokens.min(usage.output_tokens) as f64;
        let (plain_output, reasoning_cost) = match p.reasoning {
            Some(r) => (usage.output_tokens as f64 - reasoning, reasoning * r),
            None => (usage.output_tokens as f64, 0.0),
        };
        let per_million = usage.input_tokens as f64 * p.input
            + plain_output * p.output
            + reasoning_cost
            + usage.cache_read_tokens as f64 * cache_read
            + write_5m as f64 * cache_write
            + write_1h as f64 * p.cache_write_1h.unwrap_or(cache_write);
        Cost {
            usd: (per_million / 1_000_000.0).max(0.0),
            source,
        }
    }

    /// What one call's cache reads and writes saved over billing them as
    /// plain input, at the rates [`PriceTable::cost`] bills it (its prompt
    /// tier included); negative when writes cost more than reads saved.
    /// `None` for an unpriced model.
    pub fn cache_savings(&self, model: &str, provider: Option<&str>, usage: &Usage, at: f64) -> Option<f64> {
        let p = self.lookup_at(model, provider, at).0?;
        let prompt = usage
            .input_tokens
            .saturating_add(usage.cache_read_tokens)
            .saturating_add(usage.cache_write_tokens);
        let p = self.resolved(&p.for_prompt(prompt));
        Some(cache_savings_at(&p, usage.cache_read_tokens, usage.cache_write_tokens))
    }

    /// `price` with its cache rates filled in from the defaults where the
    /// entry leaves them out: the rates [`PriceTable::cost`] bills.
    pub fn resolved(&self, price: &ModelPrice) -> ModelPrice {
        ModelPrice {
            cache_read: Some(
                price
                    .cache_read
                    .unwrap_or(price.input * self.defaults.cache_read_fraction),
            ),
            cache_write: Some(
                price
                    .cache_write
                    .unwrap_or(price.input * self.defaults.cache_write_fraction),
            ),
            cache_write_1h: Some(
                price
                    .cache_write_1h
                    .unwrap_or(price.input * self.defaults.cache_write_1h_fraction),
            ),
            ..*price
        }
    }

    /// What one call is billed: the provider's own figures in `usage` when
    /// it carries them ([`provider_bill`]), else the table's cost; the
    /// table's estimate beside.
    /// Usage beyond what any provider bills in one call is held: a cost
    /// of 0 ([`PriceSource::Held`]), the table's estimate still beside it.
    pub fn bill(&self, model: &str, provider: Option<&str>, usage: &Usage, at: f64) -> Bill {
        let estimate = self.cost(model, provider, usage, at);
        if usage_beyond_bounds(usage) {
            let cost = Cost {
                usd: 0.0,
                source: PriceSource::Held,
            };
            return Bill { cost, estimate };
        }
        let cost = provider_bill(usage).unwrap_or(estimate);
        Bill { cost, estimate }
    }
}

/// What `cache_read` and `cache_write` tokens saved over plain input at
/// the rates of `price` (cache rates resolved, see [`PriceTable::resolved`]).
pub(crate) fn cache_savings_at(price: &ModelPrice, cache_read: i64, cache_write: i64) -> f64 {
    let (read, write) = (
        price.cache_read.unwrap_or(price.input),
        price.cache_write.unwrap_or(price.input),
    );
    (cache_read as f64 * (price.input - read) + cache_write as f64 * (price.input - write)) / 1_000_000.0
}

fn normalize(model: &str) -> String {
    model.trim().to_ascii_lowercase().replace('.', "-")
}

fn longest_prefix<'a>(entries: &'a Entries, id: &str) -> Option<(&'a str, ModelPrice)> {
    entries
        .iter()
        .filter(|(key, _)| id.starts_with(key.as_str()))
        .max_by_key(|(key, _)| key.len())
        .map(|(key, price)| (key.as_str(), *price))
}

/// Built-in list prices, USD per million tokens: (id prefix, input, output,
/// cache read). Cache writes default to 1.25× input. Checked against the
/// providers' price pages in 2025-2026 and against Hermes 0.19.0's own
/// snapshot (`hermes-meter pricing drift`); the user's file overrides any
/// entry. Longest prefix wins, so a newer model priced apart from its
/// family (Opus 4.5+, GPT-5.6) needs its own row.
const BUILTIN: &[(&str, f64, f64, Option<f64>)] = &[
    // Anthropic. Opus 4.5 and later bill $5/$25; Opus 4 and 4.1 $15/$75.
    ("claude-opus-4-8-fast", 10.0, 50.0, Some(1.0)),
    ("claude-opus-4-8", 5.0, 25.0, Some(0.5)),
    ("claude-opus-4-7", 5.0, 25.0, Some(0.5)),
    ("claude-opus-4-6", 5.0, 25.0, Some(0.5)),
    ("claude-opus-4-5", 5.0, 25.0, Some(0.5)),
    ("claude-opus-4-1", 15.0, 75.0, Some(1.5)),
    ("claude-opus-4", 15.0, 75.0, Some(1.5)),
    // Sonnet 5's introductory $2/$10 ended 2026-08-31.
    ("claude-sonnet-5", 3.0, 15.0, Some(0.3)),
    ("claude-sonnet-4", 3.0, 15.0, Some(0.3)),
    ("claude-3-7-sonnet", 3.0, 15.0, Some(0.3)),
    ("claude-3-5-sonnet", 3.0, 15.0, Some(0.3)),
    ("claude-haiku-4-5", 1.0, 5.0, Some(0.1)),
    ("claude-3-5-haiku", 0.8, 4.0, Some(0.08)),
    ("claude-3-haiku", 0.25, 1.25, Some(0.03)),
    ("claude-3-opus", 15.0, 75.0, Some(1.5)),
    // OpenAI
    ("gpt-5-6-sol", 5.0, 30.0, Some(0.5)),
    ("gpt-5-6-terra", 2.5, 15.0, Some(0.25)),
    ("gpt-5-6-luna", 1.0, 6.0, Some(0.1)),
    ("gpt-5-pro", 15.0, 120.0, None),
    ("gpt-5", 1.25, 10.0, Some(0.125)),
    ("gpt-5-mini", 0.25, 2.0, Some(0.025)),
    ("gpt-5-nano", 0.05, 0.4, Some(0.005)),
    ("gpt-4-1", 2.0, 8.0, Some(0.5)),
    ("gpt-4-1-mini", 0.4, 1.6, Some(0.1)),
    ("gpt-4-1-nano", 0.1, 0.4, Some(0.025)),
    ("gpt-4o", 2.5, 10.0, Some(1.25)),
    ("gpt-4o-mini", 0.15, 0.6, Some(0.075)),
    // o3 has billed $2/$8 since OpenAI's June 2025 cut (Hermes 0.19.0's
    // snapshot still says $10/$40).
    ("o3", 2.0, 8.0, Some(0.5)),
    ("o3-pro", 20.0, 80.0, None),
    ("o3-mini", 1.1, 4.4, Some(0.55)),
    ("o4-mini", 1.1, 4.4, Some(0.275)),
    ("gpt-oss-120b", 0.15, 0.6, None),
    ("gpt-oss-20b", 0.05, 0.2, None),
    // Google
    ("gemini-2-5-pro", 1.25, 10.0, Some(0.31)),
    ("gemini-2-5-flash", 0.3, 2.5, Some(0.075)),
    ("gemini-2-5-flash-lite", 0.1, 0.4, Some(0.025)),
    ("gemini-2-0-flash", 0.1, 0.4, Some(0.025)),
    // DeepSeek: chat and reasoner are aliases of v4-flash's two modes
    // since 2026-07.
    ("deepseek-chat", 0.14, 0.28, Some(0.0028)),
    ("deepseek-reasoner", 0.14, 0.28, Some(0.0028)),
    ("deepseek-v4-flash", 0.14, 0.28, Some(0.0028)),
    ("deepseek-v4-pro", 0.435, 0.87, Some(0.003625)),
    // xAI
    ("grok-4", 3.0, 15.0, Some(0.75)),
    ("grok-code-fast", 0.2, 1.5, Some(0.02)),
    // Others often routed through OpenRouter
    ("kimi-k2", 0.6, 2.5, Some(0.15)),
    ("glm-4-6", 0.6, 2.2, Some(0.11)),
    ("qwen3-coder", 0.22, 0.95, None),
    ("mistral-large", 2.0, 6.0, None),
    ("minimax-m2-7", 0.3, 1.2, None),
    ("hermes-4-405b", 1.0, 3.0, None),
    ("hermes-4-70b", 0.13, 0.4, None),
];

/// Built-in prices that hold through one provider only: Bedrock's ids and
/// rates, Fireworks' own model builds. Same columns as [`BUILTIN`].
#[allow(clippy::type_complexity)]
const BUILTIN_SCOPED: &[(&str, &[(&str, f64, f64, Option<f64>)])] = &[
    (
        "bedrock",
        &[
            ("anthropic.claude-opus-4-8", 5.0, 25.0, Some(0.5)),
            ("anthropic.claude-opus-4-7", 5.0, 25.0, Some(0.5)),
            ("anthropic.claude-opus-4-6", 5.0, 25.0, Some(0.5)),
            ("anthropic.claude-sonnet-5", 3.0, 15.0, Some(0.3)),
            ("anthropic.claude-sonnet-4", 3.0, 15.0, Some(0.3)),
            ("anthropic.claude-haiku-4-5", 0.8, 4.0, Some(0.08)),
            ("amazon.nova-pro", 0.8, 3.2, None),
            ("amazon.nova-lite", 0.06, 0.24, None),
            ("amazon.nova-micro", 0.035, 0.14, None),
        ],
    ),
    (
        "fireworks",
        &[
            ("kimi-k2p6", 0.95, 4.0, Some(0.16)),
            ("kimi-k2p6-fast", 2.0, 8.0, Some(0.3)),
            ("kimi-k2p6-turbo", 2.0, 8.0, Some(0.3)),
            ("kimi-k2p7-code", 0.95, 4.0, Some(0.19)),
            ("kimi-k2p7-code-fast", 1.9, 8.0, Some(0.38)),
            ("glm-5p2", 1.4, 4.4, Some(0.14)),
            ("glm-5p2-fast", 2.1, 6.6, Some(0.21)),
            ("glm-5p1", 1.4, 4.4, Some(0.26)),
            ("glm-5p1-fast", 2.8, 8.8, Some(0.52)),
            ("deepseek-v4-flash", 0.14, 0.28, Some(0.028)),
            ("deepseek-v4-pro", 1.74, 3.48, Some(0.145)),
            ("qwen3p7-plus", 0.4, 1.6, Some(0.08)),
            ("minimax-m3", 0.3, 1.2, Some(0.06)),
            ("minimax-m2p7", 0.3, 1.2, Some(0.06)),
            ("gpt-oss-120b", 0.15, 0.6, Some(0.015)),
            ("gpt-oss-20b", 0.07, 0.3, Some(0.035)),
        ],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_beyond_what_any_provider_bills_in_one_call_is_held_at_no_cost() {
        let prices = PriceTable::default();
        let usage = |input: i64, output: i64, cost: Option<f64>| Usage {
            input_tokens: input,
            output_tokens: output,
            provider_cost_usd: cost,
            ..Usage::default()
        };
        for (u, held) in [
            (usage(MAX_TOKENS_PER_CALL, MAX_TOKENS_PER_CALL, None), false),
            (usage(MAX_TOKENS_PER_CALL + 1, 0, None), true),
            (usage(0, 1_000_000_000_000, None), true),
            (usage(1000, 10, Some(MAX_USD_PER_CALL)), false),
            (usage(1000, 10, Some(22_000_000.0)), true),
        ] {
            assert_eq!(usage_beyond_bounds(&u), held, "{u:?}");
            let bill = prices.bill("gpt-4o", None, &u, 0.0);
            assert_eq!(bill.cost.source == PriceSource::Held, held, "{u:?}");
            if held {
                assert_eq!(bill.cost.usd, 0.0);
            }
        }
    }

    fn usage(input: i64, output: i64, read: i64, write: i64, reasoning: i64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: read,
            cache_write_tokens: write,
            cache_write_1h_tokens: 0,
            reasoning_tokens: reasoning,
            prompt_tokens: Some(input + read + write),
            total_tokens: Some(input + read + write + output),
            provider_cost_usd: None,
            provider_upstream_usd: None,
            provider_byok: false,
        }
    }

    fn table(text: &str) -> PriceTable {
        let mut t = PriceTable::default();
        t.add_user_prices(text, Path::new("pricing.toml"))
            .expect("valid pricing");
        t
    }

    #[test]
    fn cost_adds_the_four_token_kinds_and_never_prompt_or_total() {
        let t = table("[models.m]\ninput = 2.0\noutput = 8.0\ncache_read = 0.5\ncache_write = 2.5\n");
        let c = t.cost("m", None, &usage(5000, 3000, 100_000, 15_000, 2500), 0.0);
        let expected = (5000.0 * 2.0 + 3000.0 * 8.0 + 100_000.0 * 0.5 + 15_000.0 * 2.5) / 1e6;
        assert!((c.usd - expected).abs() < 1e-12, "{} != {expected}", c.usd);
        assert_eq!(c.source, PriceSource::User);
    }

    #[test]
    fn cache_prices_default_to_fractions_of_input() {
        let t = table("[models.m]\ninput = 10.0\noutput = 0.0\n");
        let c = t.cost("m", None, &usage(0, 0, 1_000_000, 1_000_000, 0), 0.0);
        assert!((c.usd - (10.0 * 0.1 + 10.0 * 1.25)).abs() < 1e-9);
    }

    #[test]
    fn reasoning_priced_apart_moves_from_the_output_price() {
        let t = table("[models.m]\ninput = 0.0\noutput = 10.0\nreasoning = 20.0\n");
        let c = t.cost("m", None, &usage(0, 1_000_000, 0, 0, 400_000), 0.0);
        assert!((c.usd - (0.6 * 10.0 + 0.4 * 20.0)).abs() < 1e-9);
    }

    #[test]
    fn longest_prefix_wins_and_user_overrides_builtin() {
        let t = PriceTable::default();
        assert_eq!(t.lookup("gpt-4o-mini-2024-07-18", None).0.map(|p| p.input), Some(0.15));
        assert_eq!(t.lookup("openai/gpt-4o", None).0.map(|p| p.input), Some(2.5));
        assert_eq!(t.lookup("anthropic/claude-sonnet-4.5", None).1, PriceSource::Builtin);
        let t = table("[models.\"claude-sonnet-4-5\"]\ninput = 1.0\noutput = 1.0\n");
        assert_eq!(
            t.lookup("anthropic/claude-sonnet-4.5", None),
            (t.lookup("claude-sonnet-4-5", None).0, PriceSource::User)
        );
    }

    #[test]
    fn free_ids_cost_nothing_and_unknown_models_are_flagged() {
        let t = PriceTable::default();
        let c = t.cost(
            "meta-llama/llama-3.3-70b-instruct:free",
            None,
            &usage(1000, 1000, 0, 0, 0),
            0.0,
        );
        assert_eq!((c.usd, c.source), (0.0, PriceSource::Free));
        let c = t.cost("mock-model", None, &usage(1000, 1000, 0, 0, 0), 0.0);
        assert_eq!((c.usd, c.source), (0.0, PriceSource::Unknown));
    }

    #[test]
    fn host_prices_fill_in_for_unknown_models_only() {
        let mut t = PriceTable::default();
        let p = ModelPrice::flat(2.0, 8.0);
        t.set_host_price("mock-model", p);
        t.set_host_price("gpt-4o", p);
        assert_eq!(t.lookup("mock-model", None), (Some(p), PriceSource::Host));
        assert_eq!(t.lookup("gpt-4o", None).1, PriceSource::Builtin);
    }

    #[test]
    fn a_tier_bills_the_whole_request_above_its_prompt_size() {
        let t = table(
            "[models.g]\ninput = 1.0\noutput = 10.0\ncache_read = 0.1\nabove_tokens = 200000\n\
             above = { input = 2.0, output = 15.0 }\n",
        );
        // At the limit: base rates.
        let c = t.cost("g", None, &usage(150_000, 1_000_000, 50_000, 0, 0), 0.0);
        assert!((c.usd - (0.15 + 10.0 + 0.005)).abs() < 1e-9, "{}", c.usd);
        // One token more: every token at the tier's rates; the cache read
        // rate the tier leaves out keeps the base one.
        let c = t.cost("g", None, &usage(150_001, 1_000_000, 50_000, 0, 0), 0.0);
        let expected = 150_001.0 * 2.0 / 1e6 + 15.0 + 50_000.0 * 0.1 / 1e6;
        assert!((c.usd - expected).abs() < 1e-9, "{} != {expected}", c.usd);
    }

    #[test]
    fn cache_savings_are_the_cache_tokens_at_input_rate_minus_what_they_were_billed() {
        let t = table(
            "[models.g]\ninput = 1.0\noutput = 10.0\ncache_read = 0.1\ncache_write = 1.25\nabove_tokens = 200000\n\
             above = { input = 2.0, output = 15.0 }\n",
        );
        // 100k reads save $0.9 per million at base rates; 10k writes cost $0.25 per million more.
        let saved = t
            .cache_savings("g", None, &usage(0, 0, 100_000, 10_000, 0), 0.0)
            .expect("priced");
        assert!((saved - (0.09 - 0.0025)).abs() < 1e-12, "{saved}");
        // Above the tier, input is $2: reads (kept at $0.10) save $1.90 per million.
        let saved = t
            .cache_savings("g", None, &usage(150_000, 0, 100_000, 0, 0), 0.0)
            .expect("priced");
        assert!((saved - 0.19).abs() < 1e-12, "{saved}");
        assert_eq!(
            t.cache_savings("unknown-model-x", None, &usage(0, 0, 1, 0, 0), 0.0),
            None
        );
    }

    #[test]
    fn prices_scoped_to_a_provider_win_for_that_provider_only() {
        let t = table(
            "[models.\"vendor/m\"]\ninput = 1.0\noutput = 1.0\n\
             [providers.OpenRouter.models.\"vendor/m\"]\ninput = 2.0\noutput = 2.0\n",
        );
        let u = usage(1_000_000, 0, 0, 0, 0);
        assert_eq!(t.cost("vendor/m", Some("openrouter"), &u, 0.0).usd, 2.0);
        assert_eq!(t.cost("vendor/m", Some("custom"), &u, 0.0).usd, 1.0);
        assert_eq!(t.cost("vendor/m", None, &u, 0.0).usd, 1.0);
        let m = t.find("vendor/m", Some("openrouter"));
        assert_eq!(
            (m.key.as_deref(), m.provider.as_deref()),
            (Some("vendor/m"), Some("openrouter"))
        );
        // A scoped entry for another model leaves the built-in price alone.
        assert_eq!(t.lookup("gpt-4o", Some("openrouter")).1, PriceSource::Builtin);
    }

    #[test]
    fn one_hour_cache_writes_bill_at_their_own_rate_and_unsaid_ones_at_five_minutes() {
        // Claude's list price: input $3, a five-minute write $3.75 (1.25x),
        // a one-hour write $6 (2x) by default or as the entry says.
        let t = table("[models.claude]\ninput = 3.0\noutput = 15.0\ncache_write = 3.75\n");
        let mut u = usage(0, 0, 0, 1_000_000, 0);
        assert!(
            (t.cost("claude", None, &u, 0.0).usd - 3.75).abs() < 1e-12,
            "no lifetime said: five minutes"
        );
        u.cache_write_1h_tokens = 400_000;
        let want = (600_000.0 * 3.75 + 400_000.0 * 6.0) / 1e6;
        assert!((t.cost("claude", None, &u, 0.0).usd - want).abs() < 1e-12);
        // More one-hour tokens than writes (a bogus split) bills the writes once.
        u.cache_write_1h_tokens = 5_000_000;
        assert!((t.cost("claude", None, &u, 0.0).usd - 6.0).abs() < 1e-12);
        let own = table("[models.claude]\ninput = 3.0\noutput = 15.0\ncache_write_1h = 5.0\n");
        assert!((own.cost("claude", None, &u, 0.0).usd - 5.0).abs() < 1e-12);
        let fraction =
            table("[defaults]\ncache_write_1h_fraction = 3.0\n[models.claude]\ninput = 3.0\noutput = 15.0\n");
        assert!((fraction.cost("claude", None, &u, 0.0).usd - 9.0).abs() < 1e-12);
    }

    #[test]
    fn an_upstream_charge_is_billed_with_the_gateways_fee_on_a_users_own_key() {
        let t = table("[models.m]\ninput = 1.0\noutput = 1.0\n");
        let upstream = |cost: Option<f64>, upstream: f64, byok: bool| {
            let mut u = usage(1_000_000, 0, 0, 0, 0);
            u.provider_cost_usd = cost;
            u.provider_upstream_usd = Some(upstream);
            u.provider_byok = byok;
            t.bill("m", None, &u, 0.0)
        };
        let at = |usd: f64| Cost {
            usd,
            source: PriceSource::Upstream,
        };
        // OpenRouter's own example of a call on the user's key: a fee of
        // 0.95 on an upstream charge of 19; the bill is both.
        assert_eq!(upstream(Some(0.95), 19.0, true).cost, at(19.95));
        // Nous Portal: the upstream charge, about 5x the token price, is
        // what the wallet pays; a smaller `cost` beside it does not lower it.
        assert_eq!(upstream(Some(0.2), 1.0, false).cost, at(1.0));
        assert_eq!(upstream(None, 1.0, false).cost, at(1.0));
        // A gateway whose cost includes its upstream's: the larger figure.
        assert_eq!(upstream(Some(1.5), 1.0, false).cost, at(1.5));
        // A key of the user's own with no fee reported: the upstream charge.
        assert_eq!(upstream(None, 0.4, true).cost, at(0.4));
        // The table's estimate stays beside it whichever wins.
        assert_eq!(
            upstream(Some(0.95), 19.0, true).estimate,
            Cost {
                usd: 1.0,
                source: PriceSource::User
            }
        );
        assert_eq!(PriceSource::Upstream.as_str(), UPSTREAM);
        // A bogus upstream figure is held like a bogus cost.
        let held = upstream(None, MAX_USD_PER_CALL * 10.0, false);
        assert_eq!((held.cost.usd, held.cost.source), (0.0, PriceSource::Held));
    }

    #[test]
    fn a_provider_reported_cost_wins_and_the_estimate_stays_beside_it() {
        let t = table("[models.m]\ninput = 1.0\noutput = 1.0\n");
        let mut u = usage(1_000_000, 0, 0, 0, 0);
        let b = t.bill("m", None, &u, 0.0);
        assert_eq!(
            (b.cost, b.estimate),
            (
                b.estimate,
                Cost {
                    usd: 1.0,
                    source: PriceSource::User
                }
            )
        );
        u.provider_cost_usd = Some(1.25);
        let b = t.bill("m", None, &u, 0.0);
        assert_eq!(
            b.cost,
            Cost {
                usd: 1.25,
                source: PriceSource::Provider
            }
        );
        assert_eq!(
            b.estimate,
            Cost {
                usd: 1.0,
                source: PriceSource::User
            }
        );
        // Also for a model no table knows.
        assert_eq!(t.bill("mock-model", None, &u, 0.0).cost.source, PriceSource::Provider);
    }

    #[test]
    fn bad_pricing_files_are_refused() {
        let mut t = PriceTable::default();
        for bad in [
            "[models.m]\ninput = 1.0\n",
            "[models.m]\ninput = -1.0\noutput = 1.0\n",
            "[models.m]\ninput = 1.0\noutput = 1.0\ncolour = 3\n",
            "nonsense = [\n",
            "[models.m]\ninput = 1.0\noutput = 1.0\nabove_tokens = 10\n",
            "[models.m]\ninput = 1.0\noutput = 1.0\nabove = { input = 2.0 }\n",
            "[models.m]\ninput = 1.0\noutput = 1.0\nabove_tokens = 0\nabove = { input = 2.0 }\n",
            "[models.m]\ninput = 1.0\noutput = 1.0\nabove_tokens = 9\nabove = { input = -2.0 }\n",
            "[providers.p.models.m]\ninput = -1.0\noutput = 1.0\n",
            "[providers.p]\ninput = 1.0\n",
        ] {
            assert!(t.add_user_prices(bad, Path::new("p.toml")).is_err(), "{bad}");
        }
    }
}
