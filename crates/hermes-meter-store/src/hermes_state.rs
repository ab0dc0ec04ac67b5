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

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

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

/// Hermes's database, read-only with a short busy wait (Hermes may be
/// writing); `None` when the file is absent.
fn open(path: &Path) -> Result<Option<Connection>> {
    if !path.is_file() {
        return Ok(None);
    }
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    conn.busy_timeout(std::time::Duration::from_millis(500))?;
    Ok(Some(conn))
}

/// The sessions Hermes started in `[since, until)`, oldest first (at most
/// [`MAX_SESSIONS`], the newest kept). `Ok(None)` when the file is absent.
pub fn sessions_between(hermes_home: &Path, since: f64, until: f64) -> Result<Option<Vec<HermesSession>>> {
    let path = hermes_home.join(HERMES_STATE_FILE);
    let Some(conn) = open(&path)? else {
        return Ok(None);
    };
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

/// Most sessions [`session_infos`] looks up at once (a page of the list).
pub const MAX_INFO_IDS: usize = 200;

/// What Hermes knows of a session that the plugin does not record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HermesSessionInfo {
    /// The title Hermes gave it (asked of the model, or typed).
    pub title: Option<String>,
    /// How long the first user message is, in characters.
    pub first_prompt_chars: Option<i64>,
}

/// Hermes's title and first prompt's length for each of `ids` it knows (at
/// most [`MAX_INFO_IDS`]). `Ok(None)` when the file is absent. Read in
/// Hermes 0.19.0 and 0.22.2 (`messages` with `session_id`, `role`,
/// `content`, `timestamp`, indexed by session and time).
pub fn session_infos(hermes_home: &Path, ids: &[&str]) -> Result<Option<HashMap<String, HermesSessionInfo>>> {
    let Some(conn) = open(&hermes_home.join(HERMES_STATE_FILE))? else {
        return Ok(None);
    };
    let has = |table: &str, column: &str| -> Result<bool> {
        Ok(conn
            .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
            .exists(rusqlite::params![table, column])?)
    };
    let has_title = has("sessions", "title")?;
    let has_messages = has("messages", "content")? && has("messages", "role")? && has("messages", "timestamp")?;
    let mut title = conn.prepare(if has_title {
        "SELECT title FROM sessions WHERE id = ?1"
    } else {
        "SELECT NULL FROM sessions WHERE id = ?1"
    })?;
    let mut prompt = conn.prepare(if has_messages {
        "SELECT length(content) FROM messages WHERE session_id = ?1 AND role = 'user' \
         ORDER BY timestamp, id LIMIT 1"
    } else {
        "SELECT NULL WHERE ?1 IS NULL"
    })?;
    let mut out = HashMap::new();
    for id in ids.iter().take(MAX_INFO_IDS) {
        let Some(title) = title.query_row([id], |r| r.get::<_, Option<String>>(0)).optional()? else {
            continue;
        };
        let first_prompt_chars = prompt.query_row([id], |r| r.get(0)).optional()?.flatten();
        out.insert(
            id.to_string(),
            HermesSessionInfo {
                title: title.filter(|t| !t.trim().is_empty()),
                first_prompt_chars,
            },
        );
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Hermes home whose state.db `sql` made.
    fn state_db(sql: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(HERMES_STATE_FILE)).unwrap();
        conn.execute_batch(sql).unwrap();
        dir
    }

    #[test]
    fn sessions_are_read_in_their_window_oldest_first() {
        let dir = state_db(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, parent_session_id TEXT, \
             started_at REAL NOT NULL, title TEXT);
             INSERT INTO sessions VALUES ('a', 'cli', NULL, 100, 'first'), ('b', 'cron', NULL, 200, NULL),
                                         ('c', 'subagent', 'b', 300, NULL);",
        );
        let got = sessions_between(dir.path(), 150.0, 400.0).unwrap().unwrap();
        let ids: Vec<_> = got.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        assert_eq!(got[1].parent_session_id.as_deref(), Some("b"));
        assert!(sessions_between(&dir.path().join("none"), 0.0, 1.0).unwrap().is_none());
    }

    #[test]
    fn titles_and_first_prompts_are_read_for_the_ids_asked() {
        let dir = state_db(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, parent_session_id TEXT, \
             started_at REAL NOT NULL, title TEXT);
             CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT, timestamp REAL);
             INSERT INTO sessions VALUES ('a', 'cli', NULL, 100, 'Fix the build'), ('b', 'cron', NULL, 200, '  ');
             INSERT INTO messages VALUES (1, 'a', 'system', 'you are', 1), (2, 'a', 'user', 'héllo there', 3),
                                         (3, 'a', 'user', 'later', 4), (4, 'a', 'user', 'earlier but after', 3);",
        );
        let got = session_infos(dir.path(), &["a", "b", "nope"]).unwrap().unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got["a"].title.as_deref(), Some("Fix the build"));
        // Characters, not bytes; the first by time, then by row.
        assert_eq!(got["a"].first_prompt_chars, Some(11));
        assert_eq!(got["b"], HermesSessionInfo::default());
        assert!(session_infos(&dir.path().join("none"), &["a"]).unwrap().is_none());
    }

    #[test]
    fn a_hermes_without_titles_is_read_too() {
        let dir = state_db(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, parent_session_id TEXT, \
             started_at REAL NOT NULL); INSERT INTO sessions VALUES ('a', 'cli', NULL, 100);",
        );
        let got = sessions_between(dir.path(), 0.0, 1e12).unwrap().unwrap();
        assert_eq!(got[0].title, None);
        let infos = session_infos(dir.path(), &["a"]).unwrap().unwrap();
        assert_eq!(infos["a"], HermesSessionInfo::default());
    }
}
