//! The fleet database's variables: `HERMES_METER_FLEET_URL` and the libpq
//! ones read beside it (`PGPASSWORD`, `PGPASSFILE`, `PGSSLROOTCERT`,
//! `PGSSLCERT`, `PGSSLKEY`, `HOME` for `~/.pgpass`), the host name
//! the fleet shows, and what a host that never synced does
//! (`HERMES_METER_FLEET_UNSYNCED`).
//!
//! Owns: reading them from the process environment. Must not touch: their
//! meaning (`fleet/config.rs` parses the URL as libpq does, with a lookup
//! this module hands it), the network.

use std::ffi::OsString;

use super::parse::Resolver;
use super::Resolved;
use hermes_meter_model::budget::Unsynced;

/// `closed` (the default) or `open`: whether fleet budgets block calls on a
/// host whose store never synced, once the first wait is over.
use hermes_meter_model::budget::UNSYNCED_ENV;

/// The variable that turns fleet budgets on.
pub const FLEET_URL_ENV: &str = "HERMES_METER_FLEET_URL";

/// The lookup `fleet/config.rs` resolves the fleet from: a variable of the
/// process environment, empty counted as unset (as libpq does).
pub fn var(name: &str) -> Option<OsString> {
    super::process_var_set(name)
}

/// Whether a fleet is configured (`HERMES_METER_FLEET_URL` set, not empty).
pub fn configured() -> bool {
    var(FLEET_URL_ENV).is_some()
}

/// `HOSTNAME` as set (possibly empty), for when the kernel does not say.
pub(crate) fn hostname_var() -> Option<String> {
    super::process_var("HOSTNAME")
}

/// What a host whose store never synced does once the first gated call's
/// wait for the sync is over: `explicit`, else `HERMES_METER_FLEET_UNSYNCED`
/// (a value other than `closed` or `open` is warned about and ignored),
/// else [`Unsynced::Closed`]. Warnings go to `warnings`.
pub(crate) fn unsynced_from(
    explicit: Option<Unsynced>,
    var: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Resolved<Unsynced> {
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let mut r = Resolver {
        var: &var,
        warnings: Vec::new(),
    };
    let resolved = r.setting(explicit, &[UNSYNCED_ENV], Unsynced::parse, Unsynced::default());
    warnings.extend(r.warnings);
    resolved
}

/// [`unsynced_from`] the process environment.
pub fn unsynced() -> Resolved<Unsynced> {
    unsynced_from(None, &super::process_var, &mut Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Source;

    fn resolve(explicit: Option<Unsynced>, env: Option<&str>) -> (Resolved<Unsynced>, Vec<String>) {
        let env = env.map(str::to_string);
        let var = move |name: &str| (name == UNSYNCED_ENV).then(|| env.clone()).flatten();
        let mut warnings = Vec::new();
        (unsynced_from(explicit, &var, &mut warnings), warnings)
    }

    #[test]
    fn an_unsynced_host_fails_closed_by_default() {
        let (r, warnings) = resolve(None, None);
        assert_eq!((r.value, r.source), (Unsynced::Closed, Source::Default));
        assert!(warnings.is_empty());
    }

    #[test]
    fn the_variable_opens_it_and_an_argument_wins_over_the_variable() {
        let (r, _) = resolve(None, Some("open"));
        assert_eq!((r.value, r.source), (Unsynced::Open, Source::Env(UNSYNCED_ENV)));
        let (r, _) = resolve(Some(Unsynced::Closed), Some("open"));
        assert_eq!((r.value, r.source), (Unsynced::Closed, Source::Explicit));
    }

    #[test]
    fn a_value_not_understood_is_warned_about_and_the_default_kept() {
        let (r, warnings) = resolve(None, Some("yes"));
        assert_eq!((r.value, r.source), (Unsynced::Closed, Source::Default));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains(UNSYNCED_ENV), "{warnings:?}");
    }
}
