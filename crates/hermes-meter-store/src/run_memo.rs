//! What this connection knows of each run's descriptive columns, so an
//! event that would change none of them costs no statement.
//!
//! Nearly every event refreshes its run (platform, model, provider, base
//! URL, first and last event time) and nearly every refresh changes
//! nothing: the two statements it took were a fifth of an event's apply
//! time. The memo mirrors what the ledger wrote or read; the statements run
//! only when the event says something the memo does not hold.
//!
//! It is a cache of this connection's own writes, kept only across
//! committed transactions (the store drops it when a transaction fails) and
//! only while no other connection commits: SQLite's `data_version` moves
//! when one does (another Hermes process, the exporter), and the memo then
//! starts over.

use std::collections::HashMap;

/// Runs remembered at most; the memo starts over when full.
const MAX_RUNS: usize = 4096;

/// What an event says about its run.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RunSays<'a> {
    pub platform: Option<&'a str>,
    pub cron_job_id: Option<&'a str>,
    pub model: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub base_url: Option<&'a str>,
    pub at: f64,
}

/// A run's columns as the ledger last wrote or read them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RunFacts {
    pub has_platform: bool,
    pub has_cron_job_id: bool,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub started_at: f64,
    pub last_event_at: f64,
}

impl RunFacts {
    /// The columns after the ledger's refresh with what `says` (the same
    /// rules as the UPDATE in `touch_run`).
    pub(super) fn with(&self, says: &RunSays<'_>) -> RunFacts {
        let pick = |new: Option<&str>, old: &Option<String>| new.map(str::to_string).or_else(|| old.clone());
        RunFacts {
            has_platform: self.has_platform || says.platform.is_some(),
            has_cron_job_id: self.has_cron_job_id || says.cron_job_id.is_some(),
            model: pick(says.model, &self.model),
            provider: pick(says.provider, &self.provider),
            base_url: pick(says.base_url, &self.base_url),
            started_at: self.started_at.min(says.at),
            last_event_at: if says.at >= self.last_event_at + 1.0 {
                says.at
            } else {
                self.last_event_at
            },
        }
    }

    /// A new run's columns.
    pub(crate) fn new_run(says: &RunSays<'_>) -> RunFacts {
        RunFacts {
            has_platform: says.platform.is_some(),
            has_cron_job_id: says.cron_job_id.is_some(),
            model: says.model.map(str::to_string),
            provider: says.provider.map(str::to_string),
            base_url: says.base_url.map(str::to_string),
            started_at: says.at,
            last_event_at: says.at,
        }
    }

    /// Whether the event says something about the run beyond its time:
    /// a platform or cron job it had none of, another model, provider or
    /// base URL, an earlier start.
    fn says_more(&self, says: &RunSays<'_>) -> bool {
        let differs = |new: Option<&str>, old: &Option<String>| new.is_some_and(|n| old.as_deref() != Some(n));
        (!self.has_platform && says.platform.is_some())
            || (!self.has_cron_job_id && says.cron_job_id.is_some())
            || differs(says.model, &self.model)
            || differs(says.provider, &self.provider)
            || differs(says.base_url, &self.base_url)
            || says.at < self.started_at
    }

    /// Whether the refresh would write anything (the UPDATE's WHERE).
    pub(crate) fn changed_by(&self, says: &RunSays<'_>) -> bool {
        self.says_more(says) || says.at >= self.last_event_at + 1.0
    }

    /// Whether all the refresh would write is a later last event (by a
    /// second or more): the common case, written without touching the
    /// columns the rollup and `run_hours` triggers watch.
    pub(crate) fn only_later(&self, says: &RunSays<'_>) -> bool {
        !self.says_more(says) && says.at >= self.last_event_at + 1.0
    }
}

/// Runs by session id.
#[derive(Debug, Default)]
pub(crate) struct RunMemo {
    runs: HashMap<String, RunFacts>,
    /// `PRAGMA data_version` when the memo was last true.
    data_version: Option<i64>,
}

impl RunMemo {
    /// Forgets everything when another connection has committed since.
    pub(super) fn follow(&mut self, data_version: i64) {
        if self.data_version != Some(data_version) {
            self.runs.clear();
            self.data_version = Some(data_version);
        }
    }

    pub(super) fn get(&self, session_id: &str) -> Option<&RunFacts> {
        self.runs.get(session_id)
    }

    pub(super) fn put(&mut self, session_id: &str, facts: RunFacts) {
        if let Some(known) = self.runs.get_mut(session_id) {
            *known = facts;
            return;
        }
        if self.runs.len() >= MAX_RUNS {
            self.runs.clear();
        }
        self.runs.insert(session_id.to_string(), facts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn says(at: f64) -> RunSays<'static> {
        RunSays {
            at,
            ..RunSays::default()
        }
    }

    #[test]
    fn only_news_changes_a_run() {
        let run = RunFacts::new_run(&RunSays {
            platform: Some("cli"),
            model: Some("m"),
            ..says(100.0)
        });
        assert!(!run.changed_by(&says(100.5)), "same second, nothing new");
        assert!(!run.changed_by(&RunSays {
            platform: Some("cron"),
            model: Some("m"),
            ..says(100.2)
        }));
        assert!(run.changed_by(&says(101.0)), "a second later moves last_event_at");
        assert!(run.changed_by(&says(99.0)), "an earlier event moves started_at");
        assert!(run.changed_by(&RunSays {
            model: Some("other"),
            ..says(100.1)
        }));
        assert!(run.changed_by(&RunSays {
            provider: Some("p"),
            ..says(100.1)
        }));
        assert!(run.changed_by(&RunSays {
            cron_job_id: Some("job"),
            ..says(100.1)
        }));
        let later = run.with(&RunSays {
            model: Some("other"),
            ..says(101.5)
        });
        assert_eq!(later.model.as_deref(), Some("other"));
        assert_eq!(later.last_event_at, 101.5);
        assert_eq!(later.started_at, 100.0);
        assert!(!later.changed_by(&says(102.0)));
    }

    #[test]
    fn the_memo_starts_over_when_full() {
        let mut memo = RunMemo::default();
        for i in 0..MAX_RUNS + 1 {
            memo.put(&format!("s{i}"), RunFacts::new_run(&says(1.0)));
        }
        assert!(memo.get("s0").is_none());
        assert!(memo.get(&format!("s{MAX_RUNS}")).is_some());
    }
}
