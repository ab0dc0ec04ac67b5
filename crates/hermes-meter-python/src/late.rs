//! The package's work that must wait until Hermes runs an agent: resolving
//! the Hermes integration points and installing their wraps
//! (`hermes_meter._integrations.first_hook`).
//!
//! Why here: `register()` may run on Hermes's plugin-discovery thread
//! while the main thread is importing the modules those points live in, so
//! it imports none of them (see `_integrations.py`). The first call of any
//! of our hooks is the first moment Hermes is certainly running an agent
//! rather than importing one; this module makes that call settle the
//! points, once. Owns: the pending flag, checked with one atomic load per
//! hook call. Must not touch: the bridge, the store.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use pyo3::prelude::*;

/// Set by `register` (through `settle_pending(True)`), cleared once the
/// package settled.
static PENDING: AtomicBool = AtomicBool::new(false);

/// 0: nobody settles now; 1: a thread is settling (others go on at once:
/// the hook must not wait for it).
static RUNNING: AtomicU8 = AtomicU8::new(0);

/// What the package says.
pub(crate) fn set_pending(pending: bool) {
    PENDING.store(pending, Ordering::Release);
}

/// At a hook call: settles the package's points if they still wait and no
/// other thread is settling them. Never raises; a failure is the package's
/// to log (its `settle` catches everything) and is not tried again.
pub(crate) fn settle_if_pending(py: Python<'_>) {
    if !PENDING.load(Ordering::Acquire) {
        return;
    }
    if RUNNING
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let _ = py
        .import("hermes_meter._integrations")
        .and_then(|m| m.getattr("first_hook")?.call0());
    PENDING.store(false, Ordering::Release);
    RUNNING.store(0, Ordering::Release);
}
