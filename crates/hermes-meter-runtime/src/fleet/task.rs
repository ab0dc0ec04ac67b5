//! The fleet sync thread inside a Hermes process (or `hermes-meter serve`):
//! one per process, syncing only while the process holds the store's
//! [`super::FLEET_LEASE`], so one process per store talks to the database.
//!
//! Owns: the thread, its pacing, its lease. Must not touch: the hook path
//! (hooks never wait for this thread), Python.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::sync::FleetSync;
use super::{FleetConfig, FLEET_LEASE, SYNC_INTERVAL};
use crate::bridge::Background;
use hermes_meter_store::error::Result;
use hermes_meter_store::{Outbox, DB_FILE_NAME};

/// How long the fleet lease lasts unless renewed: several sync intervals,
/// so a slow step does not lose it; a holder killed with -9 is replaced at
/// once anyway (`process::holder_is_gone`).
const LEASE_TTL_SECONDS: f64 = 15.0;

/// Pause after a failed step: the database is down or refusing; trying
/// every few seconds catches up soon after it returns.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(2);

struct State {
    stop: bool,
    /// A flush asks for a step now.
    step_now: bool,
    /// Steps finished (successful or not), for flushes to wait on.
    steps_done: u64,
    /// This process held the fleet lease at its last look.
    leased: bool,
}

impl Default for State {
    fn default() -> Self {
        State {
            stop: false,
            step_now: false,
            steps_done: 0,
            // Until the first step says otherwise: a flush asked for before
            // it must be served, not skipped.
            leased: true,
        }
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    done: Condvar,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The running fleet sync thread of this process.
pub struct FleetTask {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl FleetTask {
    /// Starts the sync of the store in `store_dir` with the fleet `cfg`.
    pub fn start(store_dir: &Path, cfg: FleetConfig) -> Result<Self> {
        let store = Outbox::open(&store_dir.join(DB_FILE_NAME))?;
        let sync = FleetSync::new(cfg, store_dir);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let handle = crate::bridge::spawn("hermes-meter-fleet", move || run(store, sync, &thread_shared))?;
        Ok(FleetTask {
            shared,
            handle: Some(handle),
        })
    }

    /// Starts the sync when `HERMES_METER_FLEET_URL` is set.
    pub fn start_from_env(store_dir: &Path) -> Result<Option<Self>> {
        match FleetConfig::from_env()? {
            Some(cfg) => Ok(Some(Self::start(store_dir, cfg)?)),
            None => Ok(None),
        }
    }
}

fn run(mut store: Outbox, mut sync: FleetSync, shared: &Shared) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(target: "Fleet.StartFailed", "no runtime for the fleet sync: {e}");
            return;
        }
    };
    let holder = crate::process::lease_holder();
    let mut failing = false;
    loop {
        let now = hermes_meter_store::unix_now();
        let leased = crate::export::take_lease(&mut store, FLEET_LEASE, &holder, now, LEASE_TTL_SECONDS);
        let wait = match leased {
            Ok(true) => match runtime.block_on(sync.step(&store, now)) {
                Ok(s) => {
                    if failing {
                        tracing::info!(target: "Fleet.Recovered", "fleet sync works again");
                    }
                    failing = false;
                    if s.more {
                        Duration::ZERO
                    } else {
                        SYNC_INTERVAL
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(target: "Fleet.SyncFailed", "fleet sync failed, budgets use the last fleet totals: {e}");
                    }
                    failing = true;
                    RETRY_AFTER_FAILURE
                }
            },
            Ok(false) => SYNC_INTERVAL,
            Err(_) => RETRY_AFTER_FAILURE,
        };
        let mut state = lock(&shared.state);
        state.leased = matches!(leased, Ok(true));
        state.steps_done += 1;
        shared.done.notify_all();
        if !state.stop && !state.step_now {
            state = shared
                .wake
                .wait_timeout(state, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        state.step_now = false;
        if state.stop {
            break;
        }
    }
    let _ = store.release_lease(FLEET_LEASE, &holder);
}

impl Background for FleetTask {
    /// Pushes now what this process recorded (a one-shot `hermes -z` that
    /// is about to exit), waiting until `deadline` at most; at once when
    /// another process of the store holds the fleet lease (it pushes the
    /// store's spend, this process's included).
    fn flush(&self, deadline: Instant) -> bool {
        let mut state = lock(&self.shared.state);
        if state.stop || !state.leased {
            return true;
        }
        // The step running now may have read the store before the last
        // commits: wait for the one after it.
        let target = state.steps_done + 2;
        state.step_now = true;
        self.shared.wake.notify_all();
        while state.steps_done < target {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self
                .shared
                .done
                .wait_timeout(state, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            if state.steps_done + 1 == target {
                state.step_now = true;
                self.shared.wake.notify_all();
            }
        }
        true
    }

    fn shutdown(&mut self, deadline: Instant) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self.handle.take() {
            crate::bridge::join_until(handle, deadline);
        }
    }
}

impl Drop for FleetTask {
    fn drop(&mut self) {
        self.shutdown(Instant::now() + Duration::from_millis(200));
    }
}
