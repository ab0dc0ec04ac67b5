//! The fleet schema in PostgreSQL: versioned, forward-only migrations
//! (`migrations/NNNN_*.sql`), like the store's.
//!
//! Owns: `hermes_fleet_schema` (one row: the version) and running the
//! migrations. Each migration runs in its own transaction under a
//! transaction-scoped advisory lock, so hosts starting together migrate
//! once; a failed one leaves the previous version. A database of a newer
//! version than this build is refused, never guessed at.

use tokio_postgres::Client;

use super::config::pg_error;
use hermes_meter_store::error::{Error, Result};

/// Migrations, in order; entry `i` brings the schema to version `i + 1`.
const MIGRATIONS: &[&str] = &[include_str!("migrations/0001_fleet.sql")];

/// The fleet schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock key hosts migrate under ("hermes-meter fleet" folded
/// into an i64, fixed forever).
const MIGRATION_LOCK: i64 = 0x6865_726d_6573_666c;

/// Brings the fleet schema to [`SCHEMA_VERSION`]; returns the version it
/// found.
pub async fn migrate(client: &mut Client) -> Result<i64> {
    let mut found = None;
    loop {
        let tx = client.transaction().await.map_err(pg_error)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(pg_error)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS hermes_fleet_schema (version bigint NOT NULL)")
            .await
            .map_err(pg_error)?;
        let version: i64 = tx
            .query_opt("SELECT version FROM hermes_fleet_schema", &[])
            .await
            .map_err(pg_error)?
            .map(|r| r.get(0))
            .unwrap_or(0);
        found.get_or_insert(version);
        if version > SCHEMA_VERSION {
            return Err(Error::Other(format!(
                "fleet database schema version {version} is newer than this build supports ({SCHEMA_VERSION}); \
                 upgrade hermes-meter on this host"
            )));
        }
        if version == SCHEMA_VERSION {
            tx.commit().await.map_err(pg_error)?;
            return Ok(found.unwrap_or(version));
        }
        tx.batch_execute(MIGRATIONS[version as usize])
            .await
            .map_err(|e| Error::Other(format!("fleet migration to version {}: {}", version + 1, pg_error(e))))?;
        if version == 0 {
            tx.execute("INSERT INTO hermes_fleet_schema (version) VALUES (1)", &[])
                .await
                .map_err(pg_error)?;
        } else {
            tx.execute("UPDATE hermes_fleet_schema SET version = $1", &[&(version + 1)])
                .await
                .map_err(pg_error)?;
        }
        tx.commit().await.map_err(pg_error)?;
    }
}
