//! `hermes-meter doctor`: checks the store file and, asked to, rebuilds a
//! damaged one from what it still lets us read plus the spool.
//!
//! The damaged file is never modified or deleted: a rebuild reads it
//! read-only where it is, builds the new store beside it under a temporary
//! name, checks it (integrity, the events it holds) and fsyncs it, and only
//! then keeps the damaged file (and its `-wal` and `-shm`) as
//! `hermes-meter.db.damaged-<unix time>` and renames the new one into
//! place; then it applies what dead processes left in their spools. If the
//! build fails, or nothing at all could be read, the damaged file stays
//! where it was and nothing replaces it. It refuses while a Hermes process
//! uses the store (a live spool).

use std::path::{Path, PathBuf};

use clap::Args;

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_model::pricing::PriceTable;
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::health::{FaultKind, Tracker};
use hermes_meter_store::{self, Doctor, Reader, Rebuilt, Writer, DAMAGED_INFIX, DB_FILE_NAME};

/// Problems listed at most.
const MAX_PROBLEMS: usize = 20;

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// Rebuild a damaged store: keep the damaged file aside, re-apply every
    /// readable journal event and the spools to a fresh store.
    #[arg(long)]
    rebuild: bool,
    /// Rebuild even when the integrity check finds nothing wrong.
    #[arg(long, requires = "rebuild")]
    force: bool,
}

pub(super) fn run(dir: &Path, args: &DoctorArgs) -> Result<i32> {
    let db = dir.join(DB_FILE_NAME);
    if !db.exists() {
        // (A damaged store kept aside beside no store is `existing_home`'s.)
        return Err(Error::Other(format!(
            "no store at {} (nothing to check; is --home or HERMES_METER_HOME right?)",
            db.display()
        )));
    }
    // A file that is not this build's store is not checked, rebuilt or
    // moved: the error says what to do with it. One that cannot be read
    // far enough to tell is damage, for the integrity check below.
    if let Err(e @ (Error::PreReleaseStore { .. } | Error::NotAStore { .. } | Error::SchemaTooNew { .. })) =
        hermes_meter_store::check_identity(&db)
    {
        return Err(e);
    }
    // What Hermes ran that was not recorded comes first, as in `status`:
    // a store can be whole while the plugin was never running.
    if let Ok(reader) = hermes_meter_store::Reader::open(&db) {
        let hermes_home = hermes_meter_runtime::config::hermes_home().value;
        let view =
            crate::hermes_check::HermesView::look(&reader, dir, (!super::embedded()).then_some(hermes_home.as_path()));
        for problem in view.problems() {
            println!("PROBLEM {problem}");
        }
    }
    let spooled = waiting_spools(dir);
    let integrity = Doctor::new(&db)
        .check_integrity(MAX_PROBLEMS)
        .map(|i| i.problems)
        .unwrap_or_else(|e| vec![e.to_string()]);
    // Read-only is not damage: the file reads whole, only writers fail.
    let read_only = Doctor::new(&db).check_writable();
    if integrity.is_empty() {
        println!("store {}: whole (PRAGMA integrity_check: ok)", db.display());
        if let Some(why) = &read_only {
            println!(
                "store {}: READ-ONLY, not damaged ({why}): reading commands work; Hermes cannot record into it \
                 until it is writable again",
                db.display()
            );
        }
    } else {
        println!(
            "store {}: DAMAGED ({} problem{} found; first: {})",
            db.display(),
            integrity.len(),
            if integrity.len() == 1 { "" } else { "s" },
            integrity[0]
        );
        for p in integrity.iter().skip(1) {
            println!("  {p}");
        }
        record_fault(dir, &db, &integrity[0]);
    }
    if spooled.files > 0 {
        println!(
            "spool: {} file(s) of {} (dead processes' files are applied by the next command or Hermes process)",
            spooled.files,
            if spooled.live > 0 {
                format!("{} running process(es)", spooled.live)
            } else {
                "ended processes".into()
            }
        );
    }
    if !args.rebuild {
        if integrity.is_empty() {
            return Ok(0);
        }
        println!(
            "what to do: stop Hermes (and `hermes-meter serve`), then run `hermes-meter doctor --rebuild`; \
             it keeps the damaged file aside and rebuilds the store from what it can read plus the spool"
        );
        return Ok(1);
    }
    if integrity.is_empty() && !args.force {
        println!("nothing to rebuild (--force rebuilds a whole store anyway)");
        return Ok(0);
    }
    if let Some(why) = read_only {
        return Err(Error::Other(format!(
            "cannot rebuild {}: {why}; a rebuild writes the new store beside it",
            db.display()
        )));
    }
    if spooled.live > 0 {
        return Err(Error::Other(format!(
            "{} running process(es) use {} (their spools are locked); stop Hermes and `hermes-meter serve` before a rebuild",
            spooled.live,
            dir.display()
        )));
    }
    rebuild(dir, &db)
}

fn rebuild(dir: &Path, db: &Path) -> Result<i32> {
    let stamp = hermes_meter_store::unix_now() as u64;
    let aside = with_suffix(db, &format!("{DAMAGED_INFIX}{stamp}"));
    let fresh = dir.join(format!(".{DB_FILE_NAME}.rebuild-{stamp}"));
    let before = file_identity(db);
    let prices = hermes_meter_runtime::config::load_prices(&dir.join(hermes_meter_runtime::config::PRICING_FILE_NAME))?;
    // Built beside the damaged store, which stays where it is, read-only,
    // until the new one is complete and checked.
    let rebuilt = match build(db, &fresh, &prices) {
        Ok(rebuilt) => rebuilt,
        Err(e) => {
            remove_with_wal(&fresh);
            return Err(Error::Other(format!(
                "the rebuild failed ({e}); {} was left as it was, and nothing replaced it",
                db.display()
            )));
        }
    };
    if rebuilt.journal_read == 0 && rebuilt.carried.is_empty() {
        remove_with_wal(&fresh);
        println!(
            "nothing could be read from {}: it was left in place, unchanged; a new store would hold nothing              of it. Move it aside by hand to start afresh (`mv {0} {0}.damaged`)",
            db.display()
        );
        return Ok(1);
    }
    if file_identity(db) != before {
        remove_with_wal(&fresh);
        return Err(Error::Other(format!(
            "{} changed during the rebuild (a Hermes process started?); it was left in place and nothing \
             replaced it: stop Hermes and run the rebuild again",
            db.display()
        )));
    }
    swap(db, &fresh, &aside)?;
    println!("kept the damaged store as {}", aside.display());
    let mut store = Writer::open(db)?;
    store.set_prices(prices);
    let recovered = hermes_meter_runtime::spool::recover(&mut store, dir, None, DecodeOptions::default());
    store.checkpoint()?;
    println!(
        "rebuilt {}: {} journal events read, {} applied, {}{} unreadable, {} undecodable; {} events from {} spool file(s)",
        db.display(),
        rebuilt.journal_read,
        rebuilt.applied,
        if rebuilt.journal_unreadable_exact { "" } else { "about " },
        rebuilt.journal_unreadable,
        rebuilt.undecodable,
        recovered.applied,
        recovered.files
    );
    let carried: Vec<String> = rebuilt.carried.iter().map(|(t, n)| format!("{t} ({n})")).collect();
    println!("carried over: {}", carried.join(", "));
    for t in &rebuilt.unreadable {
        println!("not readable, rebuilt from the events instead: {t}");
    }
    match rebuilt.cost_differs {
        Some(0) => {}
        Some(n) => println!("{n} LLM call(s) now cost differently: they were priced again with today's prices"),
        None => println!("the damaged store's LLM calls could not be read: every cost is priced with today's prices"),
    }
    for e in &recovered.errors {
        println!("spool: {e}");
    }
    let mut health = Tracker::default();
    let now = hermes_meter_store::unix_now();
    health.fault(FaultKind::Corrupt, format!("{} was damaged", db.display()), now);
    health.recovered(now);
    let _ = health.write(dir, now);
    Ok(0)
}

/// Builds the new store at `fresh` from what `damaged` still reads, then
/// checks it: one file (its WAL folded in), on disk (fsynced), whole
/// (`integrity_check`), holding every event applied.
fn build(damaged: &Path, fresh: &Path, prices: &PriceTable) -> Result<Rebuilt> {
    let rebuilt = {
        let mut store = Writer::open(fresh)?;
        store.set_prices(prices.clone());
        let rebuilt = Doctor::new(damaged).rebuild_into(
            &mut store,
            super::DEFAULT_IDLE_TIMEOUT_SECONDS,
            hermes_meter_store::unix_now(),
        )?;
        store.checkpoint_truncate()?;
        rebuilt
    };
    let integrity = Doctor::new(fresh).check_integrity(MAX_PROBLEMS)?;
    if !integrity.ok() {
        return Err(Error::Other(format!(
            "the new store does not pass integrity_check ({})",
            integrity.problems.join("; ")
        )));
    }
    let journal = Reader::open(fresh)?.journal_rows()?;
    if journal as u64 != rebuilt.applied {
        return Err(Error::Other(format!(
            "the new store holds {journal} journal rows, {} were applied",
            rebuilt.applied
        )));
    }
    // The writer's last close checkpointed the WAL into the file; what the
    // checks' readers left beside it is empty, and must not be left under
    // the temporary name.
    let wal = with_suffix(fresh, "-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return Err(Error::Other(format!(
            "{} was not folded into the new store",
            wal.display()
        )));
    }
    remove_sidecars(fresh);
    std::fs::File::open(fresh)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(fresh, e))?;
    Ok(rebuilt)
}

/// Puts `fresh` in place of `db`, keeping `db` as `aside`: the damaged file
/// is linked under its new name first, so `db` names the old store or the
/// new one at every moment; its WAL moves aside before the new store is in
/// place (a WAL beside a database is applied to it). Undone if the last
/// step fails.
fn swap(db: &Path, fresh: &Path, aside: &Path) -> Result<()> {
    std::fs::hard_link(db, aside)
        .or_else(|_| std::fs::copy(db, aside).map(|_| ()))
        .map_err(|e| Error::io(aside, e))?;
    let mut moved = Vec::new();
    for suffix in ["-wal", "-shm"] {
        let from = with_suffix(db, suffix);
        if from.exists() {
            let to = with_suffix(aside, suffix);
            std::fs::rename(&from, &to).map_err(|e| Error::io(&from, e))?;
            moved.push((from, to));
        }
    }
    if let Err(e) = std::fs::rename(fresh, db) {
        for (from, to) in moved {
            let _ = std::fs::rename(to, from);
        }
        let _ = std::fs::remove_file(aside);
        return Err(Error::io(db, e));
    }
    // The renames are durable once the directory is.
    if let Some(dir) = db.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// The length and modification time of `path`, to notice a writer.
fn file_identity(path: &Path) -> Option<(u64, std::time::SystemTime)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

fn remove_with_wal(path: &Path) {
    let _ = std::fs::remove_file(path);
    remove_sidecars(path);
}

fn remove_sidecars(path: &Path) {
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(with_suffix(path, suffix));
    }
}

/// Notes in `<store>/health.json` that the file is damaged, so `status`
/// says so too.
fn record_fault(dir: &Path, db: &Path, first: &str) {
    let mut health = Tracker::default();
    let now = hermes_meter_store::unix_now();
    // The advice comes from the kind where the fault is shown (`status`).
    health.fault(
        FaultKind::Corrupt,
        format!("{} is damaged ({first})", db.display()),
        now,
    );
    let _ = health.write(dir, now);
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

struct Spooled {
    files: usize,
    live: usize,
}

/// Spool files waiting, and how many of them a running process holds.
fn waiting_spools(dir: &Path) -> Spooled {
    let mut out = Spooled { files: 0, live: 0 };
    let Ok(entries) = std::fs::read_dir(dir.join(hermes_meter_runtime::spool::SPOOL_DIR_NAME)) else {
        return out;
    };
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        out.files += 1;
        if let Ok(file) = std::fs::File::open(&path) {
            if matches!(file.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)) {
                out.live += 1;
            }
        }
    }
    out
}
