//! Hook calls while the interpreter exits.
//!
//! CPython 3.11 to 3.13 ends a thread that takes the GIL back once the
//! interpreter finalizes with `pthread_exit`, whose forced unwinding
//! through Rust frames kills the process (SIGSEGV). Hermes runs agents on
//! daemon threads (its background review, for one) that keep calling hooks
//! while the main thread exits; a hook of theirs that released the GIL (or
//! ran Python code, which may switch threads) at that moment would crash
//! Hermes. So:
//!
//! - every call from Python that may let go of the GIL counts itself in
//!   flight ([`enter`]);
//! - the exit flush ([`begin_exit`], from `atexit`, before finalization
//!   starts) marks the process exiting and, without the GIL, waits a
//!   bounded time for the calls in flight to return;
//! - from then on, a call on any other thread keeps the GIL from start to
//!   end and runs no Python code ([`Entry::AtExit`]): a hook is recorded
//!   (spooled and queued, for this process's writer or the next process)
//!   but waits for nothing, so gates give it no verdict.
//!
//! Owns: the in-flight count and the exiting mark. Must not touch: the
//! bridge (callers decide what an at-exit call does).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use pyo3::marker::Ungil;
use pyo3::Python;

static EXITING: AtomicBool = AtomicBool::new(false);
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// The thread that runs the exit flush: it finalizes the interpreter
/// itself, so its calls go on as usual.
static EXIT_THREAD: OnceLock<ThreadId> = OnceLock::new();

thread_local! {
    /// This thread's calls in flight (a hook's call can nest another).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// How one call from Python may run.
pub(crate) enum Entry {
    /// As usual; the guard counts it in flight until dropped.
    Normal(InFlight),
    /// The process is exiting and this is not its exiting thread: keep the
    /// GIL, run no Python code, wait for nothing.
    AtExit,
}

/// A call counted in flight.
pub(crate) struct InFlight(());

impl Drop for InFlight {
    fn drop(&mut self) {
        DEPTH.set(DEPTH.get() - 1);
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts the calling thread's call in flight, unless the process is
/// exiting. Counted first, then checked: the exit flush either sees the
/// count or the call sees the mark.
pub(crate) fn enter() -> Entry {
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    DEPTH.set(DEPTH.get() + 1);
    let guard = InFlight(());
    if EXITING.load(Ordering::SeqCst) && EXIT_THREAD.get() != Some(&std::thread::current().id()) {
        drop(guard);
        return Entry::AtExit;
    }
    Entry::Normal(guard)
}

/// Runs `f` without the GIL, counted in flight; at exit on another thread,
/// with the GIL (see the module docs).
pub(crate) fn detach<T: Ungil, F: Ungil + FnOnce() -> T>(py: Python<'_>, f: F) -> T {
    match enter() {
        Entry::Normal(_in_flight) => py.detach(f),
        Entry::AtExit => f(),
    }
}

/// Marks the process exiting and waits, without the GIL and up to
/// `max_wait`, for the other threads' calls in flight to return. Returns
/// how many still had not.
pub(crate) fn begin_exit(py: Python<'_>, max_wait: Duration) -> usize {
    let _ = EXIT_THREAD.set(std::thread::current().id());
    EXITING.store(true, Ordering::SeqCst);
    let own = DEPTH.get();
    let deadline = Instant::now() + max_wait;
    py.detach(|| loop {
        let others = IN_FLIGHT.load(Ordering::SeqCst).saturating_sub(own);
        if others == 0 || Instant::now() >= deadline {
            return others;
        }
        std::thread::sleep(Duration::from_millis(1));
    })
}
