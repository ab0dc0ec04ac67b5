//! Scheduled spend digests in the store: when a schedule was turned on (the
//! first period it may send), and each period's digest raised once, as an
//! alert row of kind `digest_day` or `digest_week` keyed by the period's
//! name, which the alert sinks (the webhook, Hermes's own sender) then
//! deliver once each, claimed like every alert.
//!
//! Must not touch: what a digest says (the model's `digest.rs`, the
//! runtime's `digest.rs`), the delivery (`budget/alerts.rs`'s claims).

use rusqlite::{params, OptionalExtension};

use crate::error::Result;
use crate::{Outbox, Reader};

/// The `delivered_to` of a digest's alert row: it is raised delivered, so
/// it is never shown to an agent's session as a pending alert.
pub const DIGEST_NOT_FOR_SESSIONS: &str = "digest";

/// The latest digest of a kind: its period, when it was raised, and when
/// the webhook took it and Hermes's sender sent it, if they did.
#[derive(Debug, Clone, PartialEq)]
pub struct LastDigest {
    pub period: String,
    pub raised_at: f64,
    pub posted_at: Option<f64>,
    pub sent_at: Option<f64>,
}

impl Reader {
    /// The latest digest of `kind` raised, if any.
    pub fn last_digest(&self, kind: &str) -> Result<Option<LastDigest>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT key, first_at, pushed_at, hermes_sent_at FROM alerts WHERE kind = ?1 ORDER BY key DESC LIMIT 1",
            )?
            .query_row(params![kind], |r| {
                Ok(LastDigest {
                    period: r.get(0)?,
                    raised_at: r.get(1)?,
                    posted_at: r.get(2)?,
                    sent_at: r.get(3)?,
                })
            })
            .optional()?)
    }

    /// Whether the digest of `kind` for the period `key` was raised.
    pub fn digest_raised(&self, kind: &str, key: &str) -> Result<bool> {
        Ok(self
            .conn()
            .prepare_cached("SELECT 1 FROM alerts WHERE kind = ?1 AND key = ?2")?
            .query_row(params![kind, key], |_| Ok(()))
            .optional()?
            .is_some())
    }
}

impl Outbox {
    /// When the schedule of `kind` was turned on, Unix seconds: the first
    /// call records `now` (in any process: the first to write wins) and
    /// every later one reads what was recorded.
    pub fn digest_since(&self, kind: &str, now: f64) -> Result<f64> {
        let key = format!("digest.{kind}.since");
        let conn = self.db.conn();
        conn.prepare_cached("INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING")?
            .execute(params![key, now.to_string()])?;
        let text: String = conn
            .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
            .query_row(params![key], |r| r.get(0))?;
        Ok(text.parse().unwrap_or(now))
    }

    /// Raises the digest of `kind` for the period `key` with `text`: true
    /// for the one caller, in any process, that raised it.
    pub fn raise_digest(&self, kind: &str, key: &str, text: &str, at: f64) -> Result<bool> {
        let n = self
            .db
            .conn()
            .prepare_cached(
                "INSERT INTO alerts (kind, key, text, count, first_at, last_at, delivered_at, delivered_to)
                 VALUES (?1, ?2, ?3, 1, ?4, ?4, ?4, ?5) ON CONFLICT DO NOTHING",
            )?
            .execute(params![kind, key, text, at, DIGEST_NOT_FOR_SESSIONS])?;
        Ok(n == 1)
    }
}
