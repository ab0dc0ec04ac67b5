//! The rows and facts the pure code reads, below the store: the store
//! fills them from SQL, the span, trace and metrics code reads them, and
//! neither side imports the other for them.
//!
//! Owns: plain data types and their pure encodings. Must not touch: SQL,
//! I/O, span or metric building.

mod metric;
mod spans;

pub use metric::{
    bucket_index, decode_attrs, encode_attrs, Add, ApiErrorFact, AttrValue, Attrs, GaugeRow, Increment, LlmCallFact,
    MetricFact, RunLabels, SeriesRow,
};
pub use spans::{ApprovalRow, AttemptError, AttemptRow, EdgeRow, RunRow, ToolRow, TurnRow};
