//! The lease of headroom a host takes from the fleet at each sync. Pure.
//!
//! See the bound in the module docs of the runtime's `fleet/`: a host spends at
//! most its lease between two syncs, so the sum of the leases bounds how far
//! the fleet can overshoot a hard line.

/// A host counts as live (its lease share is reserved for it) while it
/// synced within this long; a host gone longer leaves the division.
pub const HOST_LIVE_SECONDS: f64 = 15.0 * 60.0;

/// The lease for one budget, in its unit (USD or tokens): the headroom
/// under `hard_line` left by `fleet_used` (every host's spend and
/// reservations), shared by `hosts` live hosts. Zero once the fleet is at
/// the line.
pub fn lease(hard_line: f64, fleet_used: f64, hosts: i64) -> f64 {
    (hard_line - fleet_used).max(0.0) / hosts.max(1) as f64
}

/// What is left of a lease taken when this host's use was `own_at_sync`,
/// now that it is `own_now`. At or below zero the host must not start
/// another call until it syncs.
pub fn lease_left(lease: f64, own_at_sync: f64, own_now: f64) -> f64 {
    lease - (own_now - own_at_sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_share_the_headroom_and_vanish_at_the_line() {
        for (line, fleet, hosts, want) in [
            (10.0, 0.0, 1, 10.0),
            (10.0, 4.0, 3, 2.0),
            (10.0, 10.0, 3, 0.0),
            (10.0, 12.0, 2, 0.0),
            // No host seen yet (the first sync of the first host): itself.
            (10.0, 1.0, 0, 9.0),
        ] {
            assert_eq!(lease(line, fleet, hosts), want, "{line} {fleet} {hosts}");
        }
    }

    #[test]
    fn a_lease_is_used_by_own_spend_since_the_sync_only() {
        assert_eq!(lease_left(2.0, 5.0, 5.0), 2.0);
        assert_eq!(lease_left(2.0, 5.0, 6.5), 0.5);
        assert!(lease_left(2.0, 5.0, 7.0) <= 0.0);
        // A reservation released without a cost gives lease back.
        assert_eq!(lease_left(2.0, 5.0, 4.0), 3.0);
    }
}
