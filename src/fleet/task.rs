//! The fleet sync thread inside a Hermes process (or `hermes-otel serve`):
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
use crate::error::{Error, Result};
use crate::store::{Store, DB_FILE_NAME};

/// How long the fleet lease lasts unless renewed: several sync intervals,
/// so a slow step does not lose it; a holder killed with -9 is replaced at
/// once anyway (`process::holder_is_gone`).
const LEASE_TTL_SECONDS: f64 = 15.0;

/// Pause after a failed step: the database is down or refusing; trying
/// every few seconds catches up soon after it returns.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(2);

struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
}

/// The running fleet sync thread of this process.
pub struct FleetTask {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl FleetTask {
    /// Starts the sync of the store in `store_dir` with the fleet `cfg`.
    pub fn start(store_dir: &Path, cfg: FleetConfig) -> Result<Self> {
        let store = Store::open(&store_dir.join(DB_FILE_NAME))?;
        let sync = FleetSync::new(cfg, store_dir);
        let shared = Arc::new(Shared {
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("hermes-otel-fleet".into())
            .spawn(move || run(store, sync, &thread_shared))
            .map_err(|e| Error::Other(format!("cannot start the fleet thread: {e}")))?;
        Ok(FleetTask {
            shared,
            handle: Some(handle),
        })
    }

    /// Starts the sync when `HERMES_OTEL_FLEET_URL` is set.
    pub fn start_from_env(store_dir: &Path) -> Result<Option<Self>> {
        match FleetConfig::from_env()? {
            Some(cfg) => Ok(Some(Self::start(store_dir, cfg)?)),
            None => Ok(None),
        }
    }
}

fn run(mut store: Store, mut sync: FleetSync, shared: &Shared) {
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
        let now = crate::unix_now();
        let wait = match crate::export::take_lease(&mut store, FLEET_LEASE, &holder, now, LEASE_TTL_SECONDS) {
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
        let stop = shared.stop.lock().unwrap_or_else(|p| p.into_inner());
        let stop = match *stop {
            true => stop,
            false => shared
                .wake
                .wait_timeout(stop, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0),
        };
        if *stop {
            break;
        }
    }
    let _ = store.release_lease(FLEET_LEASE, &holder);
}

impl Background for FleetTask {
    fn shutdown(&mut self, deadline: Instant) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self.handle.take() {
            crate::export_task::join_until(handle, deadline);
        }
    }
}

impl Drop for FleetTask {
    fn drop(&mut self) {
        self.shutdown(Instant::now() + Duration::from_millis(200));
    }
}
