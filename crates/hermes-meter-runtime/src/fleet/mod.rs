//! Fleet budgets: one set of budgets across many hosts, through PostgreSQL.
//!
//! Owns: the fleet URL (`HERMES_METER_FLEET_URL`, [`config`]), the fleet
//! schema and its migrations in PostgreSQL ([`schema`]), the lease
//! arithmetic (`budget::lease`, pure, the model's), one sync step ([`sync`]), the background
//! thread that runs it in whichever process holds the store's fleet lease
//! ([`task`]), and fleet-wide edits of the budget file ([`budgets`]).
//! Must not touch: Python, the hook path. Hooks never wait on the network:
//! they read the local store as without a fleet, where the sync left the
//! other hosts' spend and this host's lease (`crates/hermes-meter-store/src/fleet.rs`); only before
//! a store's first sync does the first gated call wait, bounded, for this
//! thread's sync (see below).
//!
//! # Data flow
//!
//! ```text
//! hook -> decode -> store (budget_spend, budget_reservations)   [hook path, local only]
//! sync (one process per store, every SYNC_INTERVAL):
//!   push: this host's quarter-hour spend buckets (USD and tokens), as
//!         absolute totals (idempotent), and its open reservations (replaced)
//!   pull: the fleet's budget file, every scope id's fleet spend per window,
//!         the number of live hosts -> fleet_view in the local store
//! gate (any process) -> its own spend (local) + the others' (fleet_view)
//! ```
//!
//! # The overshoot bound
//!
//! At each sync a host takes, for every budget, a *lease* in the budget's
//! unit (USD or tokens; below in USD): the headroom it saw divided by the
//! live hosts, `max(0, hard line - fleet spend) / hosts`.
//! Between two syncs it spends at most that lease (its tool and LLM calls are
//! blocked once its own spend since the sync reaches it), and it counts the
//! fleet's spend as of the sync plus its own since. So a host spends, after
//! its last sync that saw the fleet under the hard line, at most the lease it
//! took there; and the fleet's spend as of the latest such sync of any host
//! includes everything the others had pushed before theirs. Hence, within a
//! window:
//!
//! > fleet spend < hard line + the sum of the hosts' last leases taken under
//! > the line, each at most (hard line - fleet spend it saw) / live hosts,
//!
//! plus, as for a local budget, the part of calls already in flight that
//! costs more than their reservation. Near a limit the leases shrink with the
//! headroom; once the fleet is at the line they are zero. A host that cannot
//! reach the database keeps enforcing on the last fleet totals plus its own
//! spend since, and once that spend reaches its lease its calls are blocked
//! until a sync succeeds: an outage never loosens the bound.
//!
//! A host whose store has never synced knows neither the fleet's budget file
//! nor its spend, and took no lease: nothing above bounds what it would
//! spend. So its first gated call waits for the first sync, at most
//! [`hermes_meter_model::budget::FIRST_SYNC_WAIT`] (2 s), on the hook thread; once the
//! store synced, the host is one of the above. If the sync has not
//! completed by then, its tool and LLM calls are blocked in enforce mode
//! until it does (`HERMES_METER_FLEET_UNSYNCED=closed`, the default), which
//! keeps the bound; with `open` they go ahead under the local budget file,
//! outside the bound (`crates/hermes-meter-runtime/src/budget/first_sync.rs`).

pub mod budgets;
pub mod config;

pub mod schema;
pub mod sync;
pub mod task;

pub use config::{FleetConfig, FLEET_URL_ENV};

/// How often the sync pushes and pulls: the delay before a `budget set`
/// elsewhere or another host's spend is seen here.
pub(crate) const SYNC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The store lease (in the store's lease table) of the process that syncs.
pub(crate) const FLEET_LEASE: &str = "fleet";
