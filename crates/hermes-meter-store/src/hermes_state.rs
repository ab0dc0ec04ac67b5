//! Hermes's own session database (`$HERMES_HOME/state.db`), read-only: the
//! sessions Hermes ran, so `status` can name the ones the plugin did not
//! record (Hermes dropped the plugin in their process, or it was not
//! enabled there). Read in Hermes 0.19.0 and 0.22.2: table `sessions` with
//! `id`, `source`, `started_at` (Unix seconds), `parent_session_id`, and
//! `title` from 0.19.0 on.
//!
//! Owns: that one query. Must not touch: Hermes's file in any other way,
//! and never from inside a Hermes process (Python's `sqlite3` is another
//! SQLite library there; POSIX locks are per process, so closing our
//! connection would drop Hermes's locks: see ARCHITECTURE.md).

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};

/// Hermes's database file name in its home.
pub const HERMES_STATE_FILE: &str = "state.db";

/// Most sessions read in one look: a bound on what a large history costs.
pub const MAX_SESSIONS: usize = 50_000;

/// One session Hermes ran.
#[derive(Debug, Clone, PartialEq)]
pub struct HermesSession {
    pub id: String,
    /// `cli`, `cron`, `telegram`, `subagent`, ...
    pub source: String,
    pub started_at: f64,
    pub parent_session_id: Option<String>,
    pub title: Option<String>,
}

/// The sessions Hermes started in `[since, until)`, oldest first (at most
/// [`MAX_SESSIONS`], the newest kept). `Ok(None)` when the file is absent.
pub fn sessions_between(hermes_home: &Path, since: f64, until: f64) -> Result<Option<Vec<HermesSession>>> {
    let path = hermes_home.join(HERMES_STATE_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    // Read-only, and a short busy wait: Hermes may be writing.
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_millis(500))?;
    let has_title = conn
        .prepare("SELECT 1 FROM pragma_table_info('sessions') WHERE name = 'title'")?
        .exists([])?;
    let sql = format!(
        "SELECT id, source, started_at, parent_session_id, {} FROM sessions \
         WHERE started_at >= ?1 AND started_at < ?2 ORDER BY started_at DESC LIMIT ?3",
        if has_title { "title" } else { "NULL" }
    );
    let mut stmt = conn
        .prepare(&sql)
        .map_err(|e| Error::Other(format!("{}: not a Hermes session database ({e})", path.display())))?;
    let mut rows: Vec<HermesSession> = stmt
        .query_map(rusqlite::params![since, until, MAX_SESSIONS as i64], |r| {
            Ok(HermesSession {
                id: r.get(0)?,
                source: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                started_at: r.get(2)?,
                parent_session_id: r.get(3)?,
                title: r.get(4)?,
            })
        })?
        .collect::<std::result::Result<_, _>>()?;
    rows.reverse();
    Ok(Some(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_read_in_their_window_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(HERMES_STATE_FILE)).unwrap();
        conn.execute_batch(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, parent_session_id TEXT, \
             started_at REAL NOT NULL, title TEXT);
             INSERT INTO sessions VALUES ('a', 'cli', NULL, 100, 'first'), ('b', 'cron', NULL, 200, NULL),
                                         ('c', 'subagent', 'b', 300, NULL);",
        )
        .unwrap();
        drop(conn);
        let got = sessions_between(dir.path(), 150.0, 400.0).unwrap().unwrap();
        let ids: Vec<_> = got.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        assert_eq!(got[1].parent_session_id.as_deref(), Some("b"));
        assert!(sessions_between(&dir.path().join("none"), 0.0, 1.0).unwrap().is_none());
    }

    #[test]
    fn a_hermes_without_titles_is_read_too() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(HERMES_STATE_FILE)).unwrap();
        conn.execute_batch(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, parent_session_id TEXT, \
             started_at REAL NOT NULL); INSERT INTO sessions VALUES ('a', 'cli', NULL, 100);",
        )
        .unwrap();
        drop(conn);
        let got = sessions_between(dir.path(), 0.0, 1e12).unwrap().unwrap();
        assert_eq!(got[0].title, None);
    }
}
