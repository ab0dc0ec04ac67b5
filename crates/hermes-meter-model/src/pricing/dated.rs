//! Prices in force from a date, and hours of the day priced apart, of the
//! user's pricing entries:
//!
//! ```toml
//! [models."deepseek-chat"]
//! input = 0.27
//! output = 1.10
//! # From a date (midnight UTC) or an RFC 3339 time on, these rates replace
//! # the ones above; calls before it keep what they were billed.
//! changes = [{ from = "2027-01-01", input = 0.54, output = 2.2 }]
//! # Hours of the day, in `tz` (default UTC), priced apart: a call made in
//! # them is billed at these rates (DeepSeek's off-peak hours).
//! hours = [{ between = "16:30-00:30", input = 0.135, output = 0.55 }]
//! ```
//!
//! A change restates only the rates it changes; the changes from before a
//! call add up, oldest first. The rates of hours are those billed in them. Owns:
//! reading both from the file's text and applying them at a call's time.
//! Must not touch: matching a model to an entry (`mod.rs`).

use std::collections::BTreeMap;
use std::path::Path;

use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::{Match, ModelPrice, PriceSource, PriceTable, TierPrice};
use crate::time::timestamp;
use crate::Invalid;

/// Rates in force from a time on.
#[derive(Debug, Clone, PartialEq)]
struct Change {
    from: Timestamp,
    rates: TierPrice,
}

/// Rates of the hours `[start, end)` of each day in `tz` (minutes after
/// midnight; `end < start` runs past midnight).
#[derive(Debug, Clone, PartialEq)]
struct Hours {
    start: i32,
    end: i32,
    tz: TimeZone,
    rates: TierPrice,
}

/// The dated changes and priced hours of one entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Schedule {
    changes: Vec<Change>,
    hours: Vec<Hours>,
}

/// Every entry's schedule, by (provider scope, normalized key).
pub(super) type Schedules = BTreeMap<(Option<String>, String), Schedule>;

impl Schedule {
    /// `price` as in force at `at` (Unix seconds): every change from at or
    /// before `at`, then the hours `at` falls in.
    pub(super) fn at(&self, price: ModelPrice, at: f64) -> ModelPrice {
        let when = timestamp(at);
        let mut p = with_changes(self, price, at);
        for h in &self.hours {
            let local = when.to_zoned(h.tz.clone());
            let minute = i32::from(local.hour()) * 60 + i32::from(local.minute());
            let inside = if h.start <= h.end {
                (h.start..h.end).contains(&minute)
            } else {
                minute >= h.start || minute < h.end
            };
            if inside {
                p = apply(p, &h.rates);
                break;
            }
        }
        p
    }

    /// Lines saying the schedule, for `pricing show`.
    pub(super) fn describe(&self) -> Vec<String> {
        let rates = |r: &TierPrice| {
            [
                ("input", r.input),
                ("output", r.output),
                ("cache read", r.cache_read),
                ("cache write", r.cache_write),
                ("cache write 1h", r.cache_write_1h),
                ("reasoning", r.reasoning),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k} ${v}")))
            .collect::<Vec<_>>()
            .join(", ")
        };
        let hm = |m: i32| format!("{:02}:{:02}", m / 60, m % 60);
        self.changes
            .iter()
            .map(|c| format!("from {}: {}", c.from, rates(&c.rates)))
            .chain(self.hours.iter().map(|h| {
                format!(
                    "between {}-{} ({}): {}",
                    hm(h.start),
                    hm(h.end),
                    h.tz.iana_name().unwrap_or("UTC"),
                    rates(&h.rates)
                )
            }))
            .collect()
    }
}

impl PriceTable {
    /// The price of `model` through `provider` in force at `at` (Unix
    /// seconds: a user's entry's dated changes and priced hours applied),
    /// and where it came from.
    pub fn lookup_at(&self, model: &str, provider: Option<&str>, at: f64) -> (Option<ModelPrice>, PriceSource) {
        let Match {
            price,
            source,
            key,
            provider: scope,
        } = self.find(model, provider);
        let price = match (price, source, key) {
            // Most tables have no schedule: no key is built for them.
            (Some(p), PriceSource::User, Some(key)) if !self.schedules.is_empty() => {
                match self.schedules.get(&(scope, key)) {
                    Some(s) => Some(s.at(p, at)),
                    None => Some(p),
                }
            }
            (price, ..) => price,
        };
        (price, source)
    }

    /// What a user's entry's dated changes and priced hours say, a line
    /// each (`pricing show`); empty for any other entry.
    pub fn schedule_lines(&self, m: &Match) -> Vec<String> {
        match (m.source, &m.key) {
            (PriceSource::User, Some(key)) => self
                .schedules
                .get(&(m.provider.clone(), key.clone()))
                .map(|s| s.describe())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

fn apply(p: ModelPrice, r: &TierPrice) -> ModelPrice {
    ModelPrice {
        input: r.input.unwrap_or(p.input),
        output: r.output.unwrap_or(p.output),
        cache_read: r.cache_read.or(p.cache_read),
        cache_write: r.cache_write.or(p.cache_write),
        cache_write_1h: r.cache_write_1h.or(p.cache_write_1h),
        reasoning: r.reasoning.or(p.reasoning),
        ..p
    }
}

/// Takes the `changes` and `hours` of every entry out of a pricing file's
/// text: the text without them (for the entries' own parser) and each
/// entry's schedule, keyed by `normalize`d key.
pub(super) fn take(text: &str, path: &Path, normalize: fn(&str) -> String) -> Result<(String, Schedules), Invalid> {
    let invalid = |message: String| Invalid {
        path: path.to_path_buf(),
        message,
    };
    let mut doc: toml::Table = toml::from_str(text).map_err(|e| invalid(e.message().to_string()))?;
    let mut out = Schedules::new();
    let mut models = |table: Option<&mut toml::Value>, scope: Option<String>| -> Result<(), Invalid> {
        let Some(toml::Value::Table(models)) = table else {
            return Ok(());
        };
        for (id, entry) in models.iter_mut() {
            let toml::Value::Table(entry) = entry else { continue };
            let schedule = take_schedule(entry, &format!("model {id:?}")).map_err(invalid)?;
            if schedule != Schedule::default() {
                out.insert((scope.clone(), normalize(id)), schedule);
            }
        }
        Ok(())
    };
    models(doc.get_mut("models"), None)?;
    if let Some(toml::Value::Table(providers)) = doc.get_mut("providers") {
        for (p, prices) in providers.iter_mut() {
            let scope = Some(p.trim().to_ascii_lowercase());
            if let toml::Value::Table(prices) = prices {
                models(prices.get_mut("models"), scope)?;
            }
        }
    }
    let text = toml::to_string(&doc).map_err(|e| invalid(e.to_string()))?;
    Ok((text, out))
}

/// Takes `changes` and `hours` out of one entry's table, parsed.
pub(super) fn take_schedule(entry: &mut toml::Table, name: &str) -> Result<Schedule, String> {
    let mut schedule = Schedule::default();
    if let Some(v) = entry.remove("changes") {
        for item in as_list(&v, name, "changes")? {
            let from = item
                .get("from")
                .and_then(toml::Value::as_str)
                .ok_or_else(|| format!("{name}: each change needs `from`, a date or an RFC 3339 time"))?;
            let from = parse_from(from).map_err(|e| format!("{name}: change from {from:?}: {e}"))?;
            schedule.changes.push(Change {
                from,
                rates: rates(item, &["from"], name)?,
            });
        }
    }
    if let Some(v) = entry.remove("hours") {
        for item in as_list(&v, name, "hours")? {
            let between = item
                .get("between")
                .and_then(toml::Value::as_str)
                .ok_or_else(|| format!("{name}: each of `hours` needs `between = \"HH:MM-HH:MM\"`"))?;
            let (start, end) = parse_between(between).map_err(|e| format!("{name}: {e}"))?;
            let tz = match item.get("tz").and_then(toml::Value::as_str) {
                None => TimeZone::UTC,
                Some(t) => TimeZone::get(t).map_err(|e| format!("{name}: tz {t:?}: {e}"))?,
            };
            schedule.hours.push(Hours {
                start,
                end,
                tz,
                rates: rates(item, &["between", "tz"], name)?,
            });
        }
    }
    Ok(schedule)
}

/// The base rates of an entry with every change from at or before `at`
/// applied, oldest first (each restates only the rates it changes; its
/// priced hours aside): what a price list is compared with.
pub(super) fn with_changes(schedule: &Schedule, base: ModelPrice, at: f64) -> ModelPrice {
    let when = timestamp(at);
    let mut due: Vec<&Change> = schedule.changes.iter().filter(|c| c.from <= when).collect();
    due.sort_by_key(|c| c.from);
    due.into_iter().fold(base, |p, c| apply(p, &c.rates))
}

fn as_list<'v>(v: &'v toml::Value, name: &str, key: &str) -> Result<Vec<&'v toml::Table>, String> {
    let toml::Value::Array(items) = v else {
        return Err(format!("{name}: `{key}` is a list of tables"));
    };
    items
        .iter()
        .map(|i| {
            i.as_table()
                .ok_or_else(|| format!("{name}: `{key}` is a list of tables"))
        })
        .collect()
}

/// The rates of a change or of hours (every key but `skip` a rate).
fn rates(item: &toml::Table, skip: &[&str], name: &str) -> Result<TierPrice, String> {
    let mut rest = item.clone();
    for k in skip {
        rest.remove(*k);
    }
    let r: TierPrice = toml::Value::Table(rest)
        .try_into()
        .map_err(|e: toml::de::Error| format!("{name}: {}", e.message()))?;
    let all = [
        r.input,
        r.output,
        r.cache_read,
        r.cache_write,
        r.cache_write_1h,
        r.reasoning,
    ];
    if all.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
        return Err(format!("{name}: prices must be finite and not negative"));
    }
    if all.iter().all(Option::is_none) {
        return Err(format!("{name}: a change or hours without a rate"));
    }
    Ok(r)
}

/// A date (midnight UTC) or an RFC 3339 time.
fn parse_from(text: &str) -> Result<Timestamp, String> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    let date: jiff::civil::Date = text.parse().map_err(|e: jiff::Error| e.to_string())?;
    date.to_zoned(TimeZone::UTC)
        .map(|z| z.timestamp())
        .map_err(|e| e.to_string())
}

/// `HH:MM-HH:MM` as minutes after midnight.
fn parse_between(text: &str) -> Result<(i32, i32), String> {
    let bad = || format!("between {text:?} is not HH:MM-HH:MM");
    let (a, b) = text.split_once('-').ok_or_else(bad)?;
    let minutes = |t: &str| -> Option<i32> {
        let (h, m) = t.trim().split_once(':')?;
        let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
        ((0..=24).contains(&h) && (0..60).contains(&m) && h * 60 + m <= 1440).then_some(h * 60 + m)
    };
    let (start, end) = (minutes(a).ok_or_else(bad)?, minutes(b).ok_or_else(bad)?);
    if start == end {
        return Err(format!("between {text:?} is empty"));
    }
    Ok((start, end % 1440))
}

#[cfg(test)]
mod tests {
    use crate::hook::Usage;
    use crate::pricing::{PriceSource, PriceTable};

    fn table(text: &str) -> PriceTable {
        let mut t = PriceTable::default();
        t.add_user_prices(text, std::path::Path::new("pricing.toml"))
            .expect("valid pricing");
        t
    }

    fn at(text: &str) -> f64 {
        text.parse::<jiff::Timestamp>().expect("time").as_second() as f64
    }

    const DEEPSEEK: &str = r#"
[models."deepseek-chat"]
input = 0.27
output = 1.10
changes = [{ from = "2027-01-01", input = 0.54 }, { from = "2027-06-01T12:00:00Z", output = 2.2 }]
hours = [{ between = "16:30-00:30", input = 0.135, output = 0.55 }]

[providers.openrouter.models."deepseek-chat"]
input = 1.0
output = 1.0
hours = [{ between = "09:00-17:00", tz = "Asia/Shanghai", input = 2.0 }]
"#;

    #[test]
    fn a_call_is_billed_at_the_rates_in_force_when_it_was_made() {
        let t = table(DEEPSEEK);
        let million = Usage {
            input_tokens: 1_000_000,
            output_tokens: 1_000_000,
            ..Default::default()
        };
        let cost = |when: &str| t.cost("deepseek-chat", None, &million, at(when)).usd;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Before any change, at the peak and off-peak hours (UTC).
        assert!(close(cost("2026-12-07T10:00:00Z"), 0.27 + 1.10));
        assert!(close(cost("2026-12-07T17:00:00Z"), 0.135 + 0.55));
        assert!(close(cost("2026-12-08T00:29:59Z"), 0.135 + 0.55), "past midnight");
        assert!(close(cost("2026-12-08T00:30:00Z"), 0.27 + 1.10));
        // From the first change, the input; from the second, the output too.
        assert!(close(cost("2027-01-01T10:00:00Z"), 0.54 + 1.10));
        assert!(close(cost("2027-06-01T11:59:59Z"), 0.54 + 1.10));
        assert!(close(cost("2027-06-01T12:00:00Z"), 0.54 + 2.2));
        // A provider's own entry has its own hours, in its own zone.
        let via = |when: &str| t.cost("deepseek-chat", Some("openrouter"), &million, at(when)).usd;
        assert!(close(via("2026-12-07T02:00:00Z"), 2.0 + 1.0), "10:00 in Shanghai");
        assert!(close(via("2026-12-07T10:00:00Z"), 1.0 + 1.0), "18:00 in Shanghai");
        // The source stays the user's, and show says the schedule.
        assert_eq!(
            t.lookup_at("deepseek-chat", None, at("2027-02-01T00:00:00Z")).1,
            PriceSource::User
        );
        let m = t.find("deepseek-chat", None);
        let lines = t.schedule_lines(&m);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("from 2027-01-01T00:00:00Z: input $0.54"),
            "{lines:?}"
        );
        assert!(
            lines[2].contains("between 16:30-00:30 (UTC): input $0.135, output $0.55"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_schedule_that_is_not_one_is_refused_with_the_entry_named() {
        for (bad, says) in [
            ("changes = [{ input = 1.0 }]", "needs `from`"),
            ("changes = [{ from = \"next year\", input = 1.0 }]", "change from"),
            ("changes = [{ from = \"2027-01-01\" }]", "without a rate"),
            ("changes = [{ from = \"2027-01-01\", input = -1.0 }]", "not negative"),
            ("changes = [{ from = \"2027-01-01\", inptu = 1.0 }]", "inptu"),
            ("hours = [{ between = \"25:00-01:00\", input = 1.0 }]", "HH:MM-HH:MM"),
            ("hours = [{ between = \"10:00-10:00\", input = 1.0 }]", "empty"),
            (
                "hours = [{ between = \"10:00-11:00\", tz = \"Mars/Base\", input = 1.0 }]",
                "Mars/Base",
            ),
            ("changes = 3", "list of tables"),
        ] {
            let text = format!("[models.m]\ninput = 1.0\noutput = 1.0\n{bad}\n");
            let mut t = PriceTable::default();
            let e = t
                .add_user_prices(&text, std::path::Path::new("pricing.toml"))
                .expect_err(bad);
            assert!(
                e.message.contains("model \"m\"") && e.message.contains(says),
                "{bad}: {}",
                e.message
            );
        }
    }
}
