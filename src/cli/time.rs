//! Parsing the times users type for `--since` and `--until`.

use jiff::{civil::Date, tz::TimeZone, Timestamp};

/// Now, in Unix seconds.
pub fn now() -> f64 {
    Timestamp::now().as_microsecond() as f64 / 1e6
}

/// Parses `2026-11-30` (midnight in `tz`), an RFC 3339 timestamp, or a
/// span back from `now` such as `30m`, `24h`, `7d`. Returns Unix seconds.
pub fn parse(text: &str, tz: &TimeZone, now: f64) -> Result<f64, String> {
    let text = text.trim();
    if let Ok(ts) = text.parse::<Timestamp>() {
        return Ok(ts.as_microsecond() as f64 / 1e6);
    }
    if let Ok(date) = text.parse::<Date>() {
        let zoned = date.to_zoned(tz.clone()).map_err(|e| e.to_string())?;
        return Ok(zoned.timestamp().as_microsecond() as f64 / 1e6);
    }
    let (num, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: f64 = num
        .parse()
        .map_err(|_| format!("cannot read {text:?} as a date, a timestamp or a span like 7d"))?;
    let seconds = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        _ => return Err(format!("unknown unit in {text:?}: use s, m, h, d or w")),
    };
    Ok(now - n * seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_timestamps_and_spans_parse() {
        let utc = TimeZone::UTC;
        assert_eq!(parse("1970-01-02", &utc, 0.0), Ok(86_400.0));
        assert_eq!(parse("1970-01-01T00:01:00Z", &utc, 0.0), Ok(60.0));
        assert_eq!(parse("2h", &utc, 10_000.0), Ok(10_000.0 - 7200.0));
        assert!(parse("yesterday", &utc, 0.0).is_err());
        assert!(parse("3y", &utc, 0.0).is_err());
    }
}
