//! Parsing the times users type for `--since` and `--until`.

use jiff::{civil::Date, tz::TimeZone, Timestamp};

/// The forms [`parse`] accepts, for error messages.
pub(crate) const ACCEPTED_FORMS: &str =
    "a date (2026-11-30), an RFC 3339 time (2026-11-30T08:00:00Z) or a span back from now (30m, 24h, 7d, 2w)";

/// Parses `2026-11-30` (midnight in `tz`), an RFC 3339 timestamp, or a
/// span back from `now` such as `30m`, `24h`, `7d`. Returns Unix seconds.
/// Every error is one line naming the accepted forms.
pub(super) fn parse(text: &str, tz: &TimeZone, now: f64) -> Result<f64, String> {
    let text = text.trim();
    let unreadable = || format!("cannot read {text:?}: use {ACCEPTED_FORMS}");
    if let Ok(ts) = text.parse::<Timestamp>() {
        return Ok(ts.as_microsecond() as f64 / 1e6);
    }
    if let Ok(date) = text.parse::<Date>() {
        let zoned = date.to_zoned(tz.clone()).map_err(|e| format!("{text:?}: {e}"))?;
        return Ok(zoned.timestamp().as_microsecond() as f64 / 1e6);
    }
    let (num, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: f64 = num.parse().map_err(|_| unreadable())?;
    let seconds = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        _ => return Err(unreadable()),
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

    #[test]
    fn an_impossible_date_is_one_line_naming_the_accepted_forms() {
        for bad in ["2026-13-45", "2026-02-30", "3y", "yesterday", ""] {
            let e = parse(bad, &TimeZone::UTC, 0.0).expect_err(bad);
            assert!(e.contains(ACCEPTED_FORMS), "{bad}: {e}");
            assert!(!e.contains('\n'), "{bad}: {e}");
            assert!(!e.contains("unit"), "{bad}: {e}");
        }
    }
}
