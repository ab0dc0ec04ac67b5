//! The rows and facts the pure code reads, below the store: the store
//! fills them from SQL, the span, trace and metrics code reads them, and
//! neither side imports the other for them.
//!
//! Owns: plain data types and their pure encodings. Must not touch: SQL,
//! I/O, span or metric building.

mod metric;
mod spans;

/// The outcome a turn or run ends with, as the ledger stores it and the
/// span and trace code read it.
pub mod outcome {
    pub const RUNNING: &str = "running";
    pub const OK: &str = "ok";
    pub const ERROR: &str = "error";
    pub const INTERRUPTED: &str = "interrupted";
    pub const ABANDONED: &str = "abandoned";
}

pub use metric::{
    bucket_index, decode_attrs, encode_attrs, Add, ApiErrorFact, AttrValue, Attrs, GaugeRow, Increment, LlmCallFact,
    MetricFact, RunLabels, SeriesRow,
};
pub(crate) use spans::time_to_first_token;
pub use spans::{ApprovalRow, AttemptError, AttemptRow, EdgeRow, RunRow, ToolRow, TurnRow};
