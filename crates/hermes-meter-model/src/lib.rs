//! hermes-meter's model: what a Hermes hook call means, what it costs, the
//! spans and metrics it becomes, and the arithmetic of budgets.
//!
//! Pure: no file, socket, database or thread is touched here, so every
//! function can be tested on values alone. The store
//! (`crates/hermes-meter-store`) fills the rows in [`rows`] from SQL; the runtime reads files
//! and the environment and hands their text here to be parsed.

pub mod advise;
pub mod budget;
pub mod content;
pub mod digest;
pub mod display;
pub mod hook;
pub mod metrics;
pub mod price_as;
pub mod pricing;
pub mod redact;
pub mod report;
pub mod rows;
pub mod semconv;
pub mod span;
pub mod time;
pub mod tool_outcome;

mod invalid;

pub use invalid::Invalid;
