//! The writer thread: one per process, the only owner of the store
//! connection. It decodes the calls queued undecoded, applies events in
//! group commits, gives the gate's verdicts, checkpoints the WAL, sweeps
//! idle runs and captured content, recovers dead processes' spools and
//! rides out store faults, all off the hook path.

use super::pace::BatchSize;
use super::*;
use crate::lock;
use hermes_meter_store::IDLE_CLOSE_BATCH;

mod retain;
pub use retain::retain_cutoffs;

/// An event the writer holds: queued by a hook, or kept while the store is
/// in trouble.
pub(super) struct Pending {
    event: HookEvent,
    ctx: EventContext,
    ticket: Option<Arc<Ticket>>,
    /// The event is in this process's spool.
    spooled: bool,
    /// Its spool line while it is not in the spool, for [`WriterThread::respool`].
    record: Option<Vec<u8>>,
    bound: Option<Option<f64>>,
}

/// The writer thread's state: the store and the gate live here only.
pub(super) struct WriterThread {
    /// `None` while the store cannot be opened (see [`WriterThread::retry`]).
    store: Option<Writer>,
    gate: Box<dyn Gate>,
    /// The prices a reopened store gets (user, built-in and host prices).
    prices: PriceTable,
    /// What the store is opened with again after a fault.
    config: BridgeConfig,
    /// Events kept, in order, while the store is in trouble; they land
    /// before anything newer once it works again.
    pending: Vec<Pending>,
    /// When to try the store again; `None` while it works.
    retry_at: Option<Instant>,
    /// The next wait between tries: doubles from `store_retry_min` up to
    /// `store_retry_max`, so a store that stays broken costs one attempt
    /// every `store_retry_max`.
    retry_delay: Duration,
    /// Exit flushes waiting while the store is in trouble: the store (and
    /// the spool) are tried every [`EXIT_RETRY_PAUSE`] until the events
    /// kept land or the flush gives up.
    exit_tickets: Vec<Arc<Ticket>>,
    /// Spooled events processed (committed or failed for good) so far.
    handled: u64,
    /// The spend bounds of this process's events applied so far (see
    /// [`QueuedSpend`]).
    applied_usd: f64,
    /// This process's `pre_tool_call` events applied (or failed for good).
    applied_tool_calls: u64,
    store_dir: PathBuf,
    decode: DecodeOptions,
    shared: Arc<Shared>,
    checkpoint_interval: Duration,
    sweep_interval: Duration,
    idle_run_seconds: f64,
    /// The sessions this process recorded events of, whose held session
    /// spans its exit releases (see [`Bridge::flush_at_exit`]).
    touched: Touched,
    /// Where content retention goes on from.
    content_cursor: ContentCursor,
    /// Where retention goes on from, and its batch sizes.
    retain_pace: retain::RetainPace,
    /// Sessions the idle sweep closes in its next transaction.
    idle_batch: BatchSize,
}

/// The sessions a process recorded events of, up to [`Touched::MAX`]; past
/// that, every session whose span was held since the process started.
struct Touched {
    sessions: std::collections::HashSet<String>,
    overflow: bool,
    since: f64,
}

impl Touched {
    /// A gateway serves many sessions; beyond this many the exit releases
    /// by time instead of by name.
    const MAX: usize = 10_000;

    fn note(&mut self, session_id: &str) {
        if self.overflow || self.sessions.contains(session_id) {
            return;
        }
        if self.sessions.len() >= Self::MAX {
            self.overflow = true;
            self.sessions.clear();
        } else {
            self.sessions.insert(session_id.to_string());
        }
    }
}

/// Opens the store for the writer: the file, its migrations, the prices and
/// the profile. Used at start and to reopen after a fault.
pub(super) fn open_store(config: &BridgeConfig, prices: &PriceTable) -> Result<Writer> {
    // A damaged store kept aside and none in its place (a rebuild that did
    // not finish): a new store would split the history in two. Like a
    // corrupt file, it is a fault the writer rides out, events in the spool,
    // until the user puts a store back.
    if let Some(line) = hermes_meter_store::missing_beside_aside(&config.store_dir) {
        return Err(hermes_meter_store::error::Error::Other(line));
    }
    let mut store = Writer::open_dir(&config.store_dir)?;
    store.set_prices(prices.clone());
    store.set_profile(config.profile.clone());
    Ok(store)
}

impl WriterThread {
    /// The writer of a bridge, with the store `opened` (or the fault that
    /// kept it closed, which it then retries), or `None` for a store its
    /// thread opens first thing (one to migrate: see [`Bridge::start`]).
    pub(super) fn new(
        config: &BridgeConfig,
        gate: Box<dyn Gate>,
        prices: &PriceTable,
        shared: Arc<Shared>,
        opened: Option<Result<Writer>>,
    ) -> Self {
        let mut writer = WriterThread {
            store: None,
            gate,
            prices: prices.clone(),
            config: config.clone(),
            pending: Vec::new(),
            retry_at: None,
            retry_delay: config.store_retry_min,
            exit_tickets: Vec::new(),
            handled: 0,
            applied_usd: 0.0,
            applied_tool_calls: 0,
            store_dir: config.store_dir.clone(),
            decode: config.decode,
            shared,
            checkpoint_interval: config.checkpoint_interval,
            sweep_interval: config.sweep_interval,
            idle_run_seconds: config.idle_run_seconds,
            touched: Touched {
                sessions: std::collections::HashSet::new(),
                overflow: false,
                since: unix_now(),
            },
            content_cursor: ContentCursor::default(),
            retain_pace: retain::RetainPace::default(),
            idle_batch: BatchSize::new(IDLE_CLOSE_BATCH),
        };
        if let Some(opened) = opened {
            writer.opened(opened);
        }
        writer
    }

    /// Takes the store, or notes why it could not be opened.
    fn opened(&mut self, opened: Result<Writer>) {
        match opened {
            Ok(store) => self.store = Some(store),
            Err(e) => {
                lock(&self.shared.health).counts.open_failures += 1;
                self.fault(classify(&e).unwrap_or(FaultKind::Unavailable), &e);
            }
        }
    }

    pub(super) fn run(mut self) {
        let mut dirty = false;
        let mut next_checkpoint = Instant::now() + self.checkpoint_interval;
        let mut next_sweep = Instant::now();
        // The last sweep left idle runs to close (the next one only closes).
        let mut idle_backlog = false;
        let mut next_retain = Instant::now() + retain::RETAIN_FIRST_DELAY;
        // A store left to this thread to open: one to migrate.
        if self.store.is_none() && self.retry_at.is_none() {
            let opened = open_store(&self.config, &self.prices);
            self.opened(opened);
        }
        // What dead processes left in their spools lands before anything new.
        self.recover();
        self.refresh_gate();
        let mut next_refresh = Instant::now() + GATE_REFRESH;
        loop {
            let mut wake_at = next_checkpoint.min(next_sweep).min(next_refresh).min(next_retain);
            if let Some(t) = self.retry_at {
                wake_at = wake_at.min(t);
            }
            let wait = wake_at.saturating_duration_since(Instant::now());
            let (jobs, stop) = self.shared.take_jobs(wait.max(Duration::from_millis(1)));
            // Kept events go before the new ones, so retry first.
            if self.retry_at.is_some_and(|t| Instant::now() >= t) {
                self.guarded(|w| w.retry(), Vec::new());
            }
            if !jobs.is_empty() {
                dirty = true;
                // A panic in the store code must not kill the writer: every
                // hook would then wait out its bound. The transaction rolls
                // back as it unwinds; the tickets of this batch report Failed.
                let tickets = jobs_tickets(&jobs);
                self.guarded(|w| w.process(jobs), tickets);
            }
            let now = Instant::now();
            if now >= next_refresh {
                self.refresh_gate();
                next_refresh = now + GATE_REFRESH;
            }
            if stop || (dirty && now >= next_checkpoint) {
                self.checkpoint();
                dirty = false;
            }
            if now >= next_checkpoint {
                next_checkpoint = now + self.checkpoint_interval;
                self.write_health();
            }
            if !stop && now >= next_sweep {
                let more = self.sweep(idle_backlog);
                idle_backlog = more;
                next_sweep = now
                    + if more {
                        retain::RETAIN_BACKLOG_PAUSE
                    } else {
                        self.sweep_interval
                    };
            }
            if !stop && now >= next_retain {
                let (worked, more) = self.retain();
                dirty |= worked;
                next_retain = now
                    + if more {
                        retain::RETAIN_BACKLOG_PAUSE
                    } else {
                        self.sweep_interval
                    };
            }
            if stop {
                break;
            }
        }
        self.write_health();
        if let Some(spool) = self.shared.spool.get() {
            // A clean exit with everything committed leaves no spool behind.
            let _ = spool.finish(self.handled);
        }
        self.shared.alive.store(false, Ordering::Release);
    }

    /// Lets the gate update which gating hooks wait ([`Gate::refresh`]).
    fn refresh_gate(&mut self) {
        if self.store.is_some() {
            self.guarded(
                |w| {
                    if let Some(store) = &w.store {
                        w.gate.refresh(store);
                    }
                },
                Vec::new(),
            );
        }
    }

    /// Runs `f`, turning a panic into a message and failed `tickets`.
    fn guarded(&mut self, f: impl FnOnce(&mut Self), tickets: Vec<Arc<Ticket>>) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(self))) {
            self.shared.message(
                "Writer.Panicked",
                format!(
                    "the store writer panicked ({}); events of that batch may not be recorded",
                    panic_text(payload.as_ref())
                ),
            );
            for t in tickets {
                t.complete(Outcome::Failed);
            }
        }
    }

    fn process(&mut self, jobs: Vec<Job>) {
        let mut events: Vec<Pending> = Vec::with_capacity(jobs.len());
        let mut flushes = Vec::new();
        let mut exiting = false;
        for job in jobs {
            match job {
                // Prices first: a host price only adds knowledge, and the
                // event that made the binding ask is in this batch or later.
                Job::HostPrice(model, price) => {
                    if let Some(store) = &mut self.store {
                        store.prices_mut().set_host_price(&model, price);
                    }
                    self.prices.set_host_price(&model, price);
                }
                Job::Event {
                    payload,
                    ctx,
                    ticket,
                    spooled,
                    record,
                    bound,
                } => {
                    let event = match payload {
                        Payload::Decoded(event) => event,
                        Payload::Line { hook, line, at, opts } => match decode_record(hook, &line, at, opts) {
                            (Decoded::Event(event, problems), profile) => {
                                events.push(Pending {
                                    event,
                                    // The line's profile, as recovery would read it.
                                    ctx: EventContext {
                                        problems,
                                        profile,
                                        ..ctx
                                    },
                                    ticket,
                                    spooled,
                                    // Not in the spool: the line is all the spool would need.
                                    record: (!spooled).then_some(line),
                                    bound,
                                });
                                continue;
                            }
                            (decoded, _) => {
                                self.not_applied(hook, decoded, ticket, spooled, bound);
                                continue;
                            }
                        },
                    };
                    events.push(Pending {
                        event,
                        ctx,
                        ticket,
                        spooled,
                        record,
                        bound,
                    })
                }
                Job::Flush(ticket) => flushes.push(ticket),
                Job::Exit(ticket) => {
                    self.exit_tickets.push(ticket);
                    exiting = true;
                }
            }
        }
        let events_empty = events.is_empty();
        if !events_empty {
            if self.retry_at.is_some() {
                // The store is in trouble: keep them behind the ones kept
                // already, and try again when the retry is due.
                self.keep(events);
            } else if let Err((kind, e, rest)) = self.commit(events) {
                lock(&self.shared.health).counts.failed_commits += 1;
                self.keep(rest);
                self.fault(kind, &e);
            }
        }
        // What this batch changed may change which gating hooks wait; a
        // flush below promises that too.
        if !events_empty {
            self.refresh_gate();
        }
        if exiting && self.retry_at.is_some() {
            // The exit is the last chance for what is kept: try the store
            // (and the spool) now, not when the backoff says, which may be
            // 30 s away while the space came back a moment ago.
            self.retry();
        }
        self.finish_exit();
        // A flush (session end, exit) empties the spool whatever its size:
        // a process that then ends leaves nothing for the next one to replay.
        self.reset_spool(if flushes.is_empty() { spool::RESET_BYTES } else { 0 });
        // A flush means "everything before me landed": not while events are kept.
        let outcome = if self.pending.is_empty() {
            Outcome::Committed(None)
        } else {
            Outcome::Failed
        };
        for ticket in flushes {
            ticket.complete(outcome.clone());
        }
        self.shared.handled.store(self.handled, Ordering::Release);
    }

    /// Finishes a call decoded here that gives no event: an unusable one is
    /// counted as failed and logged (as the hook path would have).
    fn not_applied(
        &mut self,
        hook: &str,
        decoded: Decoded,
        ticket: Option<Arc<Ticket>>,
        spooled: bool,
        bound: Option<Option<f64>>,
    ) {
        self.settle(std::iter::once(bound));
        self.handled += u64::from(spooled);
        if !spooled {
            self.shared.saved();
        }
        let outcome = match decoded {
            Decoded::Unusable(problems) => {
                self.shared.not_recorded(hook, &problems);
                Outcome::Failed
            }
            _ => Outcome::Committed(None),
        };
        if let Some(ticket) = ticket {
            ticket.complete(outcome);
        }
    }

    /// Applies `events` in one transaction, or one by one if the batch
    /// fails on one event's account. On a store fault, returns the events
    /// not applied, in order, for the caller to keep.
    fn commit(&mut self, events: Vec<Pending>) -> std::result::Result<(), (FaultKind, Error, Vec<Pending>)> {
        let Some(store) = self.store.as_mut() else {
            let e = Error::Other("the store is not open".into());
            return Err((FaultKind::Unavailable, e, events));
        };
        let counters = &self.shared.counters;
        counters.batches.fetch_add(1, Ordering::Relaxed);
        counters.largest_batch.fetch_max(events.len() as u64, Ordering::Relaxed);
        let (ok, fault) = match store.apply_batch(events.iter().map(|p| (&p.event, &p.ctx))) {
            Ok(_) => (vec![true; events.len()], None),
            Err(e) => {
                if let Some(kind) = classify(&e) {
                    return Err((kind, e, events));
                }
                // One bad event must not cost the others: apply them
                // one by one and report only the ones that fail.
                self.shared.message(
                    "Writer.BatchFailed",
                    format!("batch of {} failed ({e}); retrying one by one", events.len()),
                );
                let mut ok = Vec::with_capacity(events.len());
                let mut fault = None;
                for p in &events {
                    match store.apply(&p.event, &p.ctx) {
                        Ok(_) => ok.push(true),
                        Err(e) => {
                            if let Some(kind) = classify(&e) {
                                // The store broke half-way: the rest is kept.
                                fault = Some((kind, e));
                                break;
                            }
                            self.shared.message(
                                "Writer.EventFailed",
                                format!(
                                    "{} of session {} was not recorded: {e}",
                                    p.event.hook.name(),
                                    p.event.hook.session_id()
                                ),
                            );
                            ok.push(false);
                        }
                    }
                }
                (ok, fault)
            }
        };
        let mut events = events;
        let rest = events.split_off(ok.len());
        self.finish(events, ok);
        match fault {
            Some((kind, e)) => Err((kind, e, rest)),
            None => Ok(()),
        }
    }

    /// Counts, gates and completes events that committed (`ok`) or failed
    /// for good.
    fn finish(&mut self, events: Vec<Pending>, ok: Vec<bool>) {
        // The store now holds the whole batch: tell the gate before its
        // verdicts, which it may reuse for events that do not wait.
        self.settle(events.iter().map(|p| p.bound));
        self.applied_tool_calls += events
            .iter()
            .filter(|p| matches!(p.event.hook, hermes_meter_model::hook::Hook::PreToolCall(_)))
            .count() as u64;
        self.gate.applied(self.applied_usd, self.applied_tool_calls);
        let counters = &self.shared.counters;
        for (p, ok) in events.into_iter().zip(ok) {
            if ok {
                counters.committed.fetch_add(1, Ordering::Relaxed);
            } else {
                counters.failed.fetch_add(1, Ordering::Relaxed);
            }
            // Spooled events are handled once committed, or once they
            // failed for good (recovery would only fail them again).
            self.handled += u64::from(p.spooled);
            if !p.spooled {
                self.shared.saved();
            }
            if ok {
                self.touched.note(p.event.hook.session_id());
                if let Some(store) = &self.store {
                    self.gate.observe(store, &p.event);
                }
            }
            let Some(ticket) = p.ticket else { continue };
            let outcome = match &self.store {
                // A verdict nobody waits for would only use up what it
                // shows once (a pending alert, a notice): leave it for the
                // next gating hook.
                Some(store) if ok && is_gating(&p.event.hook) && !ticket.abandoned() => {
                    Outcome::Committed(self.gate.verdict(store, &p.event))
                }
                _ if ok => Outcome::Committed(None),
                _ => Outcome::Failed,
            };
            ticket.complete(outcome);
        }
    }

    /// Takes events that left the queue for good off [`QueuedSpend`]: their
    /// bounds join the applied total, their unknown bounds stop counting.
    fn settle(&mut self, bounds: impl Iterator<Item = Option<Option<f64>>>) {
        let mut unknown = 0;
        for bound in bounds {
            match bound {
                Some(Some(usd)) => self.applied_usd += usd,
                Some(None) => unknown += 1,
                None => {}
            }
        }
        if unknown > 0 {
            let mut spend = lock(&self.shared.spend);
            spend.unknown = spend.unknown.saturating_sub(unknown);
        }
    }

    /// Keeps `events` for when the store works again. Past [`MAX_QUEUED`]
    /// kept events, new ones are dropped: those in the spool are still
    /// recovered by the next process, the others are lost and counted.
    fn keep(&mut self, events: Vec<Pending>) {
        for p in events {
            if self.pending.len() >= MAX_QUEUED {
                // Out of the queue for good (the spool's copy, if any, is
                // recovered by the next process and counted as store spend).
                self.settle(std::iter::once(p.bound));
                self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                if !p.spooled {
                    self.shared.saved();
                    let reason = lock(&self.shared.fault_reason)
                        .clone()
                        .unwrap_or_else(|| "the store was in trouble".into());
                    let reason = format!("{reason}; {MAX_QUEUED} events were kept in memory already");
                    lock(&self.shared.health).lost(1, &reason, unix_now());
                }
                continue;
            }
            self.pending.push(p);
        }
    }

    /// Notes a store fault: one message per new fault, the store closed
    /// unless it is only locked (a reopen cannot help with that), and the
    /// next try scheduled.
    fn fault(&mut self, kind: FaultKind, e: &Error) {
        let kind = match kind {
            FaultKind::Unavailable => hermes_meter_store::health::probe(&self.store_dir).unwrap_or(kind),
            kind => kind,
        };
        let db = self.store_dir.join(hermes_meter_store::DB_FILE_NAME);
        // The record holds the fault; its advice comes from its kind, where
        // it is shown (`status`), and in this log line.
        let fault = format!("the store {} is unusable ({}: {e})", db.display(), kind.as_str());
        let text = format!("{fault}; {}", kind.advice(&db));
        let new = lock(&self.shared.health).fault(kind, fault, unix_now());
        if new {
            self.shared.message("Store.Fault", text.clone());
            self.write_health();
        }
        *lock(&self.shared.problem) = Some(text);
        *lock(&self.shared.fault_reason) = Some(format!("{}: {e}", kind.as_str()));
        if kind != FaultKind::Locked {
            self.store = None;
            // Hooks stop waiting for commits that cannot happen.
            self.shared.store_down.store(true, Ordering::Release);
        }
        let now = Instant::now();
        self.retry_at = Some(now + self.retry_delay);
        self.retry_delay = (self.retry_delay * 2).min(self.config.store_retry_max.max(self.config.store_retry_min));
        self.exit_tickets.retain(|t| !t.abandoned());
        if !self.exit_tickets.is_empty() {
            // An exit flush waits: try again within its bound.
            self.retry_at = Some(now + EXIT_RETRY_PAUSE);
        }
    }

    /// Tries the store again ([`WriterThread::try_store`]); while it still fails,
    /// appends the kept events the spool could not take to it, if it can
    /// take them now.
    fn retry(&mut self) {
        self.try_store();
        if self.retry_at.is_some() {
            self.respool();
        }
        self.shared.handled.store(self.handled, Ordering::Release);
    }

    /// Appends to the spool, in order, the kept events that are in no
    /// spool, until a write fails (the disk is still full): once written,
    /// an event survives the process, and the next one records it.
    fn respool(&mut self) {
        if !self.pending.iter().any(|p| p.record.is_some()) {
            return;
        }
        if self.shared.spool.get().is_none() {
            if let Ok(spool) = Spool::create(&self.store_dir) {
                let _ = self.shared.spool.set(Arc::new(spool));
            }
        }
        let Some(spool) = self.shared.spool.get() else { return };
        for p in self.pending.iter_mut().filter(|p| p.record.is_some()) {
            let Some(record) = &p.record else { continue };
            if spool.append(record).is_err() {
                return;
            }
            p.record = None;
            p.spooled = true;
            self.shared.counters.spooled.fetch_add(1, Ordering::Relaxed);
            self.shared.saved();
        }
    }

    /// Completes the waiting exit flushes once nothing is kept: the
    /// session spans this process held are released, and the spool is
    /// emptied whatever its size.
    fn finish_exit(&mut self) {
        if self.exit_tickets.is_empty() || !self.pending.is_empty() {
            return;
        }
        self.release_held_sessions();
        self.reset_spool(0);
        // The process ends once the exit flush returns: what it counted
        // (hook calls Hermes skipped, failures) goes into the health record
        // now, or never.
        self.write_health();
        for ticket in std::mem::take(&mut self.exit_tickets) {
            ticket.complete(Outcome::Committed(None));
        }
    }

    /// Tries the store again: reopens it if it is closed, creates the spool
    /// if it could not be created, recovers dead processes' spools and
    /// commits what was kept. Runs on the writer thread only, so no hook
    /// ever waits for this I/O.
    fn try_store(&mut self) {
        if self.store.is_none() {
            let opened = open_store(&self.config, &self.prices);
            self.opened(opened);
            if self.store.is_none() {
                return;
            }
        }
        if self.shared.spool.get().is_none() {
            if let Ok(spool) = Spool::create(&self.store_dir) {
                let _ = self.shared.spool.set(Arc::new(spool));
            }
        }
        let kept = std::mem::take(&mut self.pending);
        if !kept.is_empty() {
            if let Err((kind, e, rest)) = self.commit(kept) {
                lock(&self.shared.health).counts.failed_commits += 1;
                self.pending = rest;
                self.fault(kind, &e);
                return;
            }
        }
        self.retry_at = None;
        self.retry_delay = self.config.store_retry_min;
        self.shared.store_down.store(false, Ordering::Release);
        *lock(&self.shared.problem) = None;
        *lock(&self.shared.fault_reason) = None;
        self.shared.spool_failed.store(false, Ordering::Release);
        let recovered = lock(&self.shared.health).recovered(unix_now());
        if recovered {
            self.shared.message(
                "Store.Recovered",
                format!(
                    "the store {} works again; the events kept meanwhile are recorded",
                    self.store_dir.join(hermes_meter_store::DB_FILE_NAME).display()
                ),
            );
            self.write_health();
        }
        self.recover();
        self.reset_spool(spool::RESET_BYTES);
        self.finish_exit();
    }

    /// Lets go of the session spans this process held for their grace
    /// period, at its exit.
    fn release_held_sessions(&mut self) {
        let Some(store) = self.store.as_mut() else { return };
        let now = unix_now();
        let released = if self.touched.overflow {
            store.release_held_sessions_since(self.touched.since, now)
        } else {
            // What this process leaves open dies with it: close it now, so
            // the exit flush sends it rather than the idle closer later.
            let sessions: Vec<&str> = self.touched.sessions.iter().map(String::as_str).collect();
            store
                .close_exited_runs(&sessions, now)
                .and_then(|_| store.release_held_sessions(&sessions, now))
        };
        if let Err(e) = released {
            self.shared.message(
                "Writer.ExitReleaseFailed",
                format!("cannot release this process's session spans at exit: {e}"),
            );
        }
    }

    /// Empties this process's spool once everything in it was handled.
    fn reset_spool(&mut self, min_bytes: u64) {
        if let Some(spool) = self.shared.spool.get() {
            if let Err(e) = spool.reset_if_handled(self.handled, min_bytes) {
                self.shared.message(
                    "Spool.ResetFailed",
                    format!("cannot empty {}: {e}", spool.path().display()),
                );
            }
        }
    }

    /// Merges this process's health into `<store>/health.json` if anything
    /// changed; a failure (full or read-only disk) leaves it for next time.
    fn write_health(&mut self) {
        let mut health = lock(&self.shared.health);
        let c = &self.shared.counters;
        health.counts.spool_write_failures = c.spool_failures.load(Ordering::Relaxed);
        health.counts.hermes_skipped_recorded = c.hermes_skipped_recorded.load(Ordering::Relaxed);
        health.counts.hermes_skipped_lost = c.hermes_skipped_lost.load(Ordering::Relaxed);
        health.counts.hermes_skipped_after_timeout = c.hermes_skipped_after_timeout.load(Ordering::Relaxed);
        health.counts.hermes_timeouts = c.hermes_timeouts.load(Ordering::Relaxed);
        self.shared.note_refused(&mut health);
        if health.dirty() {
            let _ = health.write(&self.store_dir, unix_now());
        }
    }

    /// Applies what dead processes left in their spools.
    fn recover(&mut self) {
        let own = self.shared.spool.get().map(|s| s.path().to_path_buf());
        let Some(store) = &mut self.store else { return };
        let r = spool::recover(store, &self.store_dir, own.as_deref(), self.decode);
        self.shared
            .counters
            .recovered
            .fetch_add(r.applied as u64, Ordering::Relaxed);
        // A spool that held nothing new (an ended process that recorded
        // nothing, or whose events had all landed) is removed silently:
        // Hermes logs our messages as warnings, and this is no news.
        if r.applied == 0 && r.files > 0 {
            tracing::debug!(target: "Spool.Recovered", files = r.files, "removed spool files of ended processes that held nothing new");
        }
        if r.applied > 0 {
            self.shared.message(
                "Spool.Recovered",
                format!(
                    "applied {} events from {} spool file(s) of ended processes",
                    r.applied, r.files
                ),
            );
        }
        for e in r.errors {
            self.shared.message("Spool.RecoverFailed", e);
        }
    }

    fn checkpoint(&mut self) {
        // In trouble, the retry is what touches the store.
        if self.retry_at.is_some() {
            return;
        }
        let Some(store) = &self.store else { return };
        match store.checkpoint() {
            Ok(()) => {
                self.shared.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self
                .shared
                .message("Writer.CheckpointFailed", format!("WAL checkpoint failed: {e}")),
        }
    }

    /// Recovers dead processes' spools and closes one batch of idle runs
    /// (see [`Writer::close_idle_batch`]). Returns whether more idle runs
    /// may wait: the next sweep then comes after a short pause, so a
    /// backlog clears without holding the write lock for long at once.
    /// Such a sweep (`backlog`) only closes: spools are looked for on the
    /// regular sweeps, not every pause.
    fn sweep(&mut self, backlog: bool) -> bool {
        if self.retry_at.is_some() {
            return false;
        }
        if !backlog {
            self.recover();
        }
        let Some(store) = &mut self.store else { return false };
        let now = unix_now();
        let size = self.idle_batch.get();
        let began = Instant::now();
        match store.close_idle_batch(now, self.idle_run_seconds, size) {
            Ok((_, more)) => {
                self.idle_batch.took(began.elapsed(), if more { size } else { 0 });
                self.shared.counters.sweeps.fetch_add(1, Ordering::Relaxed);
                more
            }
            Err(e) => {
                self.shared
                    .message("Writer.SweepFailed", format!("closing idle runs failed: {e}"));
                false
            }
        }
    }
}

fn jobs_tickets(jobs: &[Job]) -> Vec<Arc<Ticket>> {
    jobs.iter()
        .filter_map(|job| match job {
            Job::Event { ticket, .. } => ticket.clone(),
            Job::Flush(ticket) | Job::Exit(ticket) => Some(Arc::clone(ticket)),
            Job::HostPrice(..) => None,
        })
        .collect()
}
