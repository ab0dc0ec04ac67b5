//! The `[defaults]` of a pricing file: the cache rates, as fractions of
//! the input price, of an entry that gives none.

use serde::Deserialize;

use super::{DEFAULT_CACHE_READ_FRACTION, DEFAULT_CACHE_WRITE_1H_FRACTION, DEFAULT_CACHE_WRITE_FRACTION};

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Defaults {
    #[serde(default = "default_read")]
    pub(super) cache_read_fraction: f64,
    #[serde(default = "default_write")]
    pub(super) cache_write_fraction: f64,
    #[serde(default = "default_write_1h")]
    pub(super) cache_write_1h_fraction: f64,
}

fn default_read() -> f64 {
    DEFAULT_CACHE_READ_FRACTION
}
fn default_write() -> f64 {
    DEFAULT_CACHE_WRITE_FRACTION
}
fn default_write_1h() -> f64 {
    DEFAULT_CACHE_WRITE_1H_FRACTION
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            cache_read_fraction: DEFAULT_CACHE_READ_FRACTION,
            cache_write_fraction: DEFAULT_CACHE_WRITE_FRACTION,
            cache_write_1h_fraction: DEFAULT_CACHE_WRITE_1H_FRACTION,
        }
    }
}
