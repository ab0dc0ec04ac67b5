//! The crate error type.
//!
//! Callers act on the variants (the store's health check classifies them,
//! `status` and `doctor` say what to do); everything else is a message. The
//! binding never raises them into Hermes: it logs them and returns None.

use std::path::PathBuf;

/// Every fallible operation in the crate returns this error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite refused an operation.
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),

    /// The store file was written by a newer hermes-meter.
    #[error("store schema version {found} is newer than this build supports ({supported}); upgrade hermes-meter")]
    SchemaTooNew { found: i64, supported: i64 },

    /// The store file was written by a build from before the first release,
    /// whose schema versions this build does not read; it is left as it is.
    #[error(
        "{path}: written by a pre-release build of hermes-meter (schema {found}); left as it is: \
         move its directory aside (the file keeps its data) and a new store is created"
    )]
    PreReleaseStore { path: PathBuf, found: i64 },

    /// The file is a SQLite database of some other program.
    #[error("{path}: not a hermes-meter store (SQLite application_id {application_id:#010x}); left as it is")]
    NotAStore { path: PathBuf, application_id: i32 },

    /// A migration failed; the store was left at `version`.
    #[error("migration to schema version {version} failed: {source}")]
    Migration {
        version: i64,
        #[source]
        source: rusqlite::Error,
    },

    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A configuration, pricing or budget file could not be parsed.
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },

    /// A line of a replay file is not a hook record.
    #[error("{path}:{line}: {message}")]
    BadRecord {
        path: PathBuf,
        line: usize,
        message: String,
    },

    /// Anything else, as a message.
    #[error("{0}")]
    Other(String),
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<hermes_meter_model::Invalid> for Error {
    fn from(e: hermes_meter_model::Invalid) -> Self {
        Error::Config {
            path: e.path,
            message: e.message,
        }
    }
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
