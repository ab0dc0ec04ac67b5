//! Fleet-wide edits of the budget file: `budget set` and `budget rm` with a
//! fleet change the fleet's copy in the database, which every host's sync
//! writes to its own `budgets.toml` within [`super::SYNC_INTERVAL`].
//!
//! Owns: the read-edit-write of the fleet's copy, under a row lock so two
//! hosts editing at once both land. Must not touch: the hook path.

use std::path::Path;

use super::config::{pg_error, FleetConfig};
use super::schema;
use hermes_meter_store::error::{Error, Result};

/// Applies `edit` (a local edit of a budget file at the path it is given)
/// to the fleet's budget file, then writes the result to `local`. The
/// fleet's copy is edited in a scratch file beside `local`; the first edit
/// of a fleet starts from `local`'s text. Returns the new version.
pub fn edit(cfg: &FleetConfig, local: &Path, edit: impl FnOnce(&Path) -> Result<()>) -> Result<i64> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Other(format!("fleet runtime: {e}")))?;
    runtime.block_on(async {
        let mut client = cfg.connect().await?;
        schema::migrate(&mut client).await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let current: Option<(String, i64)> = tx
            .query_opt(
                "SELECT text, version FROM hermes_fleet_budgets WHERE singleton = 1 FOR UPDATE",
                &[],
            )
            .await
            .map_err(pg_error)?
            .map(|r| (r.get(0), r.get(1)));
        let dir = local.parent().unwrap_or(Path::new("."));
        let scratch = dir.join(format!(".budgets.fleet-edit.{}.toml", std::process::id()));
        let start = match &current {
            Some((text, _)) => Some(text.clone()),
            None => std::fs::read_to_string(local).ok(),
        };
        let result = (|| {
            match &start {
                Some(text) => hermes_meter_store::write_atomically(&scratch, text.as_bytes())?,
                None => {
                    let _ = std::fs::remove_file(&scratch);
                }
            }
            edit(&scratch)?;
            std::fs::read_to_string(&scratch).map_err(|e| Error::io(&scratch, e))
        })();
        let _ = std::fs::remove_file(&scratch);
        let text = result?;
        let version = current.as_ref().map_or(1, |c| c.1 + 1);
        let by = format!("hermes-meter budget (pid {})", std::process::id());
        tx.execute(
            "INSERT INTO hermes_fleet_budgets (singleton, text, version, updated_at, updated_by)
             VALUES (1, $1, $2, $3, $4)
             ON CONFLICT (singleton) DO UPDATE SET text = excluded.text, version = excluded.version,
                updated_at = excluded.updated_at, updated_by = excluded.updated_by",
            &[&text, &version, &hermes_meter_store::unix_now(), &by],
        )
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        hermes_meter_store::write_atomically(local, text.as_bytes())?;
        Ok(version)
    })
}
