//! hermes-meter's runtime: what runs inside a Hermes process and under
//! `hermes-meter serve`.
//!
//! The per-process bridge (hook calls into the spool and the one writer
//! thread that applies them to the store), the budget gate, the OTLP
//! exporters of the three signals, the alert webhook, the fleet sync and
//! the configuration every one of them is given resolved. Data flows one
//! way: hook → decode (the model) → store → export. Knows nothing of
//! Python (the binding is `hermes-meter-python`) or of the command line.

pub mod advise;
pub mod agent_tool;
pub mod bridge;
pub mod budget;
pub mod config;
pub mod digest;
pub mod export;
pub mod export_task;
pub mod fleet;
pub mod http_server;
pub mod process;
pub mod slash;
pub mod spool;

/// Locks a mutex, ignoring poison: every critical section of this crate
/// leaves its data consistent, and a hook must never panic on a lock.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
