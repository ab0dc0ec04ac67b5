//! The fleet database's variables: `HERMES_OTEL_FLEET_URL` and the libpq
//! ones read beside it (`PGPASSWORD`, `PGPASSFILE`, `PGSSLROOTCERT`,
//! `PGSSLCERT`, `PGSSLKEY`, `HOME` for `~/.pgpass`), and the host name
//! the fleet shows.
//!
//! Owns: reading them from the process environment. Must not touch: their
//! meaning (`fleet/config.rs` parses the URL as libpq does, with a lookup
//! this module hands it), the network.

use std::ffi::OsString;

/// The variable that turns fleet budgets on.
pub const FLEET_URL_ENV: &str = "HERMES_OTEL_FLEET_URL";

/// The lookup `fleet/config.rs` resolves the fleet from: a variable of the
/// process environment, empty counted as unset (as libpq does).
pub fn var(name: &str) -> Option<OsString> {
    super::process_var_set(name)
}

/// Whether a fleet is configured (`HERMES_OTEL_FLEET_URL` set, not empty).
pub fn configured() -> bool {
    var(FLEET_URL_ENV).is_some()
}

/// `HOSTNAME` as set (possibly empty), for when the kernel does not say.
pub fn hostname_var() -> Option<String> {
    super::process_var("HOSTNAME")
}
