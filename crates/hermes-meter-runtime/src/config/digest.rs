//! The scheduled spend digest: `HERMES_METER_DIGEST`, `day`, `week` or
//! `day,week` (`off` or unset: none). Each digest goes where alerts go: the
//! alert webhook and Hermes's own sender (`webhook.rs`).

use hermes_meter_model::digest::Every;

use super::process_var;

/// The variable naming the digests to send.
pub const DIGEST_ENV: &str = "HERMES_METER_DIGEST";

/// The digests to send, from the environment; an error names a word that
/// is none of `day`, `week`, `off`.
pub fn from_env() -> Result<Vec<Every>, String> {
    parse(process_var(DIGEST_ENV).as_deref())
}

pub(crate) fn parse(value: Option<&str>) -> Result<Vec<Every>, String> {
    let mut out = Vec::new();
    for word in value.unwrap_or("").split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let every = match word.to_ascii_lowercase().as_str() {
            "day" | "daily" => Every::Day,
            "week" | "weekly" => Every::Week,
            "off" | "none" => continue,
            _ => {
                return Err(format!(
                    "{DIGEST_ENV}: {:?} is none of day, week, off",
                    word.chars().take(40).collect::<String>()
                ))
            }
        };
        if !out.contains(&every) {
            out.push(every);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digests_are_day_week_both_or_none() {
        assert_eq!(parse(None), Ok(vec![]));
        assert_eq!(parse(Some("off")), Ok(vec![]));
        assert_eq!(parse(Some(" Day ")), Ok(vec![Every::Day]));
        assert_eq!(parse(Some("day,week,day")), Ok(vec![Every::Day, Every::Week]));
        assert_eq!(parse(Some("weekly")), Ok(vec![Every::Week]));
        let e = parse(Some("hourly")).expect_err("not a period");
        assert!(e.contains(DIGEST_ENV) && e.contains("hourly"), "{e}");
    }
}
