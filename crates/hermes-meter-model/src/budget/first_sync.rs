//! A fleet host's first sync: what the gate does before its store has ever
//! synced with the fleet database, when it knows neither the fleet's budget
//! file nor its spend.
//!
//! Owns: [`Unsynced`] (fail closed or open then) and [`FIRST_SYNC_WAIT`];
//! the state hook threads wait on is the runtime's
//! (`crates/hermes-meter-runtime/src/budget/first_sync.rs`).
//!
//! A store that synced once holds the fleet's last figures (`fleet_view`,
//! the budget file the sync wrote) and is enforced on them, so only a store
//! that never synced waits: the first gated call of the process waits for
//! the sync, at most [`FIRST_SYNC_WAIT`], on its own hook thread (never the
//! writer's, which other hooks queue behind). Every gated call of the
//! process until that deadline waits with it; none after it. Past it, a
//! store still unsynced blocks tool and LLM calls in enforce mode
//! ([`Unsynced::Closed`], the default) or lets them through under the
//! local budget file ([`Unsynced::Open`]).

use std::time::Duration;

/// The longest the first gated call of a process waits for a never-synced
/// store's first fleet sync. A sync on a reachable database (connect,
/// schema check, one push and pull) takes tens of milliseconds; the fleet
/// thread starts with the first hook. Two seconds covers a slow network
/// and a cold PostgreSQL, and is as long as a one-shot `hermes -z` gives
/// its exit flush: longer would stall a user's first call on a dead
/// address for what a timeout already tells.
pub const FIRST_SYNC_WAIT: Duration = Duration::from_secs(2);

/// The variable that sets [`Unsynced`] (resolved in `crates/hermes-meter-runtime/src/config/fleet.rs`).
pub const UNSYNCED_ENV: &str = "HERMES_METER_FLEET_UNSYNCED";

/// What fleet budgets do on a host whose store has not synced yet, once
/// [`FIRST_SYNC_WAIT`] passed (`HERMES_METER_FLEET_UNSYNCED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unsynced {
    /// Block tool and LLM calls (enforce mode) until the first sync: the
    /// fleet may be over its hard line, and this host cannot know.
    #[default]
    Closed,
    /// Let them through, enforcing only the local budget file.
    Open,
}

impl Unsynced {
    /// `closed` or `open` (any case, spaces trimmed).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "closed" => Some(Unsynced::Closed),
            "open" => Some(Unsynced::Open),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Unsynced::Closed => "closed",
            Unsynced::Open => "open",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_reads_closed_and_open_only() {
        for (text, want) in [
            ("closed", Some(Unsynced::Closed)),
            (" Open ", Some(Unsynced::Open)),
            ("fail-open", None),
            ("", None),
        ] {
            assert_eq!(Unsynced::parse(text), want, "{text:?}");
        }
        assert_eq!(Unsynced::default(), Unsynced::Closed, "fail closed unless told");
    }
}
