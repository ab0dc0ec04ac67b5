//! Unix seconds (the store's times, fractional) as `jiff` timestamps, for
//! every module that works in a time zone (budget windows, dated prices).

use jiff::Timestamp;

/// A timestamp from Unix seconds (fractional); the epoch for a time jiff
/// cannot hold.
pub fn timestamp(unix: f64) -> Timestamp {
    Timestamp::from_microsecond((unix * 1e6) as i64).unwrap_or(Timestamp::UNIX_EPOCH)
}
