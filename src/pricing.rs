//! The price table and the cost of an LLM call.
//!
//! Owns: the built-in prices, the user's pricing file format, model-id
//! matching and the cost formula. Pure apart from [`PriceTable::load`],
//! which reads the user's file once.
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
//! [defaults]           # optional
//! cache_read_fraction = 0.1
//! cache_write_fraction = 1.25
//! ```
//!
//! Matching is case-insensitive, treats `.` and `-` alike (so
//! `claude-sonnet-4.5` and `claude-sonnet-4-5` are one model), and takes the
//! longest key that is a prefix of the model id, first of the whole id, then
//! of the id without its `vendor/` route. User entries win over built-in
//! ones. An id ending in `:free` costs 0. An unknown model costs 0 and is
//! flagged [`PriceSource::Unknown`], never silently.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::hook::Usage;

/// Default price of a cache read, as a fraction of the input price, when a
/// model gives none (Anthropic and recent OpenAI models charge 0.1×).
pub const DEFAULT_CACHE_READ_FRACTION: f64 = 0.1;
/// Default price of a cache write, as a fraction of the input price, when a
/// model gives none (Anthropic's five-minute cache charges 1.25×).
pub const DEFAULT_CACHE_WRITE_FRACTION: f64 = 1.25;

/// Where a cost came from. Stored with every cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceSource {
    /// The user's pricing file.
    User,
    /// The table built into hermes-otel.
    Builtin,
    /// The price Hermes itself knows for the model (set by the binding).
    Host,
    /// A `:free` model id.
    Free,
    /// No price known: the cost is recorded as 0 and flagged.
    Unknown,
}

impl PriceSource {
    /// The stored and exported spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PriceSource::User => "user",
            PriceSource::Builtin => "builtin",
            PriceSource::Host => "host",
            PriceSource::Free => "free",
            PriceSource::Unknown => "unknown",
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
    pub cache_write: Option<f64>,
    /// Only for models that price reasoning apart from other output.
    pub reasoning: Option<f64>,
}

/// A cost with its provenance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub usd: f64,
    pub source: PriceSource,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PricingFile {
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    models: BTreeMap<String, ModelPrice>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    #[serde(default = "default_read")]
    cache_read_fraction: f64,
    #[serde(default = "default_write")]
    cache_write_fraction: f64,
}

fn default_read() -> f64 {
    DEFAULT_CACHE_READ_FRACTION
}
fn default_write() -> f64 {
    DEFAULT_CACHE_WRITE_FRACTION
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            cache_read_fraction: DEFAULT_CACHE_READ_FRACTION,
            cache_write_fraction: DEFAULT_CACHE_WRITE_FRACTION,
        }
    }
}

/// User prices over built-in ones, with host prices as a fallback.
#[derive(Debug, Clone)]
pub struct PriceTable {
    defaults: Defaults,
    user: Vec<(String, ModelPrice)>,
    builtin: Vec<(String, ModelPrice)>,
    host: BTreeMap<String, ModelPrice>,
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable {
            defaults: Defaults::default(),
            user: Vec::new(),
            builtin: BUILTIN
                .iter()
                .map(|(id, input, output, cache_read)| {
                    let price = ModelPrice {
                        input: *input,
                        output: *output,
                        cache_read: *cache_read,
                        cache_write: None,
                        reasoning: None,
                    };
                    (normalize(id), price)
                })
                .collect(),
            host: BTreeMap::new(),
        }
    }
}

impl PriceTable {
    /// The built-in table with the user's file over it. A missing file is
    /// no error; an unreadable or invalid one is.
    pub fn load(path: &Path) -> Result<Self> {
        let mut table = PriceTable::default();
        match std::fs::read_to_string(path) {
            Ok(text) => table.add_user_prices(&text, path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path, e)),
        }
        Ok(table)
    }

    /// Adds the entries of a pricing file's text (see the module docs).
    pub fn add_user_prices(&mut self, text: &str, path: &Path) -> Result<()> {
        let file: PricingFile = toml::from_str(text).map_err(|e| Error::Config {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })?;
        for (id, price) in &file.models {
            let prices = [
                price.input,
                price.output,
                price.cache_read.unwrap_or(0.0),
                price.cache_write.unwrap_or(0.0),
                price.reasoning.unwrap_or(0.0),
            ];
            if prices.iter().any(|p| !p.is_finite() || *p < 0.0) {
                return Err(Error::Config {
                    path: path.to_path_buf(),
                    message: format!("model {id:?}: prices must be finite and not negative"),
                });
            }
        }
        self.defaults = file.defaults;
        self.user = file.models.into_iter().map(|(k, v)| (normalize(&k), v)).collect();
        Ok(())
    }

    /// Records the price Hermes knows for a model, used when neither the
    /// user's file nor the built-in table has it.
    pub fn set_host_price(&mut self, model: &str, price: ModelPrice) {
        self.host.insert(normalize(model), price);
    }

    /// Whether any price is known for `model` without asking the host.
    pub fn knows(&self, model: &str) -> bool {
        !matches!(self.lookup(model).1, PriceSource::Unknown | PriceSource::Host)
    }

    /// The price of `model` and where it came from.
    pub fn lookup(&self, model: &str) -> (Option<ModelPrice>, PriceSource) {
        let id = normalize(model);
        if id.ends_with(":free") {
            return (None, PriceSource::Free);
        }
        let short = id.rsplit('/').next().unwrap_or(&id);
        for (entries, source) in [(&self.user, PriceSource::User), (&self.builtin, PriceSource::Builtin)] {
            if let Some(price) = longest_prefix(entries, &id).or_else(|| longest_prefix(entries, short)) {
                return (Some(price), source);
            }
        }
        if let Some(price) = self.host.get(&id).or_else(|| self.host.get(short)) {
            return (Some(*price), PriceSource::Host);
        }
        (None, PriceSource::Unknown)
    }

    /// The cost of one call of `model` with `usage`.
    ///
    /// input·p_in + output·p_out + cache_read·p_cache_read +
    /// cache_write·p_cache_write. Reasoning tokens are part of Hermes's
    /// output count, so they cost extra only where the model prices them
    /// apart: then they move from the output price to the reasoning price.
    /// `prompt_tokens` and `total_tokens` are never added in.
    pub fn cost(&self, model: &str, usage: &Usage) -> Cost {
        let (price, source) = self.lookup(model);
        let Some(p) = price else {
            return Cost { usd: 0.0, source };
        };
        let cache_read = p.cache_read.unwrap_or(p.input * self.defaults.cache_read_fraction);
        let cache_write = p.cache_write.unwrap_or(p.input * self.defaults.cache_write_fraction);
        let reasoning = usage.reasoning_tokens.min(usage.output_tokens) as f64;
        let (plain_output, reasoning_cost) = match p.reasoning {
            Some(r) => (usage.output_tokens as f64 - reasoning, reasoning * r),
            None => (usage.output_tokens as f64, 0.0),
        };
        let per_million = usage.input_tokens as f64 * p.input
            + plain_output * p.output
            + reasoning_cost
            + usage.cache_read_tokens as f64 * cache_read
            + usage.cache_write_tokens as f64 * cache_write;
        Cost {
            usd: (per_million / 1_000_000.0).max(0.0),
            source,
        }
    }
}

fn normalize(model: &str) -> String {
    model.trim().to_ascii_lowercase().replace('.', "-")
}

fn longest_prefix(entries: &[(String, ModelPrice)], id: &str) -> Option<ModelPrice> {
    entries
        .iter()
        .filter(|(key, _)| id.starts_with(key.as_str()))
        .max_by_key(|(key, _)| key.len())
        .map(|(_, price)| *price)
}

/// Built-in list prices, USD per million tokens: (id prefix, input, output,
/// cache read). Cache writes default to 1.25× input. Checked against the
/// providers' price pages in 2025-2026; the user's file overrides any entry.
const BUILTIN: &[(&str, f64, f64, Option<f64>)] = &[
    // Anthropic
    ("claude-opus-4-5", 5.0, 25.0, Some(0.5)),
    ("claude-opus-4-1", 15.0, 75.0, Some(1.5)),
    ("claude-opus-4", 15.0, 75.0, Some(1.5)),
    ("claude-sonnet-4", 3.0, 15.0, Some(0.3)),
    ("claude-3-7-sonnet", 3.0, 15.0, Some(0.3)),
    ("claude-3-5-sonnet", 3.0, 15.0, Some(0.3)),
    ("claude-haiku-4-5", 1.0, 5.0, Some(0.1)),
    ("claude-3-5-haiku", 0.8, 4.0, Some(0.08)),
    // OpenAI
    ("gpt-5-pro", 15.0, 120.0, None),
    ("gpt-5", 1.25, 10.0, Some(0.125)),
    ("gpt-5-mini", 0.25, 2.0, Some(0.025)),
    ("gpt-5-nano", 0.05, 0.4, Some(0.005)),
    ("gpt-4-1", 2.0, 8.0, Some(0.5)),
    ("gpt-4-1-mini", 0.4, 1.6, Some(0.1)),
    ("gpt-4-1-nano", 0.1, 0.4, Some(0.025)),
    ("gpt-4o", 2.5, 10.0, Some(1.25)),
    ("gpt-4o-mini", 0.15, 0.6, Some(0.075)),
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
    // DeepSeek
    ("deepseek-chat", 0.28, 0.42, Some(0.028)),
    ("deepseek-reasoner", 0.28, 0.42, Some(0.028)),
    // xAI
    ("grok-4", 3.0, 15.0, Some(0.75)),
    ("grok-code-fast", 0.2, 1.5, Some(0.02)),
    // Others often routed through OpenRouter
    ("kimi-k2", 0.6, 2.5, Some(0.15)),
    ("glm-4-6", 0.6, 2.2, Some(0.11)),
    ("qwen3-coder", 0.22, 0.95, None),
    ("mistral-large", 2.0, 6.0, None),
    ("hermes-4-405b", 1.0, 3.0, None),
    ("hermes-4-70b", 0.13, 0.4, None),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: i64, output: i64, read: i64, write: i64, reasoning: i64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: read,
            cache_write_tokens: write,
            reasoning_tokens: reasoning,
            prompt_tokens: Some(input + read + write),
            total_tokens: Some(input + read + write + output),
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
        let c = t.cost("m", &usage(5000, 3000, 100_000, 15_000, 2500));
        let expected = (5000.0 * 2.0 + 3000.0 * 8.0 + 100_000.0 * 0.5 + 15_000.0 * 2.5) / 1e6;
        assert!((c.usd - expected).abs() < 1e-12, "{} != {expected}", c.usd);
        assert_eq!(c.source, PriceSource::User);
    }

    #[test]
    fn cache_prices_default_to_fractions_of_input() {
        let t = table("[models.m]\ninput = 10.0\noutput = 0.0\n");
        let c = t.cost("m", &usage(0, 0, 1_000_000, 1_000_000, 0));
        assert!((c.usd - (10.0 * 0.1 + 10.0 * 1.25)).abs() < 1e-9);
    }

    #[test]
    fn reasoning_priced_apart_moves_from_the_output_price() {
        let t = table("[models.m]\ninput = 0.0\noutput = 10.0\nreasoning = 20.0\n");
        let c = t.cost("m", &usage(0, 1_000_000, 0, 0, 400_000));
        assert!((c.usd - (0.6 * 10.0 + 0.4 * 20.0)).abs() < 1e-9);
    }

    #[test]
    fn longest_prefix_wins_and_user_overrides_builtin() {
        let t = PriceTable::default();
        assert_eq!(t.lookup("gpt-4o-mini-2024-07-18").0.map(|p| p.input), Some(0.15));
        assert_eq!(t.lookup("openai/gpt-4o").0.map(|p| p.input), Some(2.5));
        assert_eq!(t.lookup("anthropic/claude-sonnet-4.5").1, PriceSource::Builtin);
        let t = table("[models.\"claude-sonnet-4-5\"]\ninput = 1.0\noutput = 1.0\n");
        assert_eq!(
            t.lookup("anthropic/claude-sonnet-4.5"),
            (t.lookup("claude-sonnet-4-5").0, PriceSource::User)
        );
    }

    #[test]
    fn free_ids_cost_nothing_and_unknown_models_are_flagged() {
        let t = PriceTable::default();
        let c = t.cost("meta-llama/llama-3.3-70b-instruct:free", &usage(1000, 1000, 0, 0, 0));
        assert_eq!((c.usd, c.source), (0.0, PriceSource::Free));
        let c = t.cost("mock-model", &usage(1000, 1000, 0, 0, 0));
        assert_eq!((c.usd, c.source), (0.0, PriceSource::Unknown));
    }

    #[test]
    fn host_prices_fill_in_for_unknown_models_only() {
        let mut t = PriceTable::default();
        let p = ModelPrice {
            input: 2.0,
            output: 8.0,
            cache_read: None,
            cache_write: None,
            reasoning: None,
        };
        t.set_host_price("mock-model", p);
        t.set_host_price("gpt-4o", p);
        assert_eq!(t.lookup("mock-model"), (Some(p), PriceSource::Host));
        assert_eq!(t.lookup("gpt-4o").1, PriceSource::Builtin);
    }

    #[test]
    fn bad_pricing_files_are_refused() {
        let mut t = PriceTable::default();
        for bad in [
            "[models.m]\ninput = 1.0\n",
            "[models.m]\ninput = -1.0\noutput = 1.0\n",
            "[models.m]\ninput = 1.0\noutput = 1.0\ncolour = 3\n",
            "nonsense = [\n",
        ] {
            assert!(t.add_user_prices(bad, Path::new("p.toml")).is_err(), "{bad}");
        }
    }
}
