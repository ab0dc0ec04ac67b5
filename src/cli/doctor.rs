//! `hermes-otel doctor`: checks the store file and, asked to, rebuilds a
//! damaged one from what it still lets us read plus the spool.
//!
//! The damaged file is never modified or deleted: a rebuild renames it (and
//! its `-wal` and `-shm`) aside as `hermes-otel.db.damaged-<unix time>`,
//! builds the new store under a temporary name, moves it into place only
//! when it is complete, and then applies what dead processes left in their
//! spools. It refuses while a Hermes process uses the store (a live spool).

use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::{Error, Result};
use crate::health::{FaultKind, Tracker};
use crate::hook::DecodeOptions;
use crate::pricing::PriceTable;
use crate::store::{check_integrity, Store, DB_FILE_NAME};

/// Problems listed at most.
const MAX_PROBLEMS: usize = 20;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Rebuild a damaged store: keep the damaged file aside, re-apply every
    /// readable journal event and the spools to a fresh store.
    #[arg(long)]
    rebuild: bool,
    /// Rebuild even when the integrity check finds nothing wrong.
    #[arg(long, requires = "rebuild")]
    force: bool,
}

pub fn run(dir: &Path, args: &DoctorArgs) -> Result<i32> {
    let db = dir.join(DB_FILE_NAME);
    if !db.exists() {
        return Err(Error::Other(format!(
            "no store at {} (nothing to check; is --home or HERMES_OTEL_HOME right?)",
            db.display()
        )));
    }
    let spooled = waiting_spools(dir);
    let integrity = check_integrity(&db, MAX_PROBLEMS)
        .map(|i| i.problems)
        .unwrap_or_else(|e| vec![e.to_string()]);
    if integrity.is_empty() {
        println!("store {}: whole (PRAGMA integrity_check: ok)", db.display());
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
            "what to do: stop Hermes (and `hermes-otel serve`), then run `hermes-otel doctor --rebuild`; \
             it keeps the damaged file aside and rebuilds the store from what it can read plus the spool"
        );
        return Ok(1);
    }
    if integrity.is_empty() && !args.force {
        println!("nothing to rebuild (--force rebuilds a whole store anyway)");
        return Ok(0);
    }
    if spooled.live > 0 {
        return Err(Error::Other(format!(
            "{} running process(es) use {} (their spools are locked); stop Hermes and `hermes-otel serve` before a rebuild",
            spooled.live,
            dir.display()
        )));
    }
    rebuild(dir, &db)
}

fn rebuild(dir: &Path, db: &Path) -> Result<i32> {
    let stamp = crate::unix_now() as u64;
    let aside = with_suffix(db, &format!(".damaged-{stamp}"));
    let fresh = with_suffix(db, &format!(".rebuild-{stamp}"));
    // Aside first, with its WAL (which holds commits not yet checkpointed),
    // so nothing opens the damaged file as the store from here on.
    for suffix in ["", "-wal", "-shm"] {
        let from = with_suffix(db, suffix);
        if from.exists() {
            let to = with_suffix(&aside, suffix);
            std::fs::rename(&from, &to).map_err(|e| Error::io(&from, e))?;
        }
    }
    println!("kept the damaged store as {}", aside.display());
    let prices = PriceTable::load(&dir.join(crate::config::PRICING_FILE_NAME))?;
    let rebuilt = {
        let mut store = Store::open(&fresh)?;
        store.set_prices(prices.clone());
        let rebuilt = store.rebuild_from(&aside, super::DEFAULT_IDLE_TIMEOUT_SECONDS, crate::unix_now())?;
        store.checkpoint()?;
        rebuilt
    };
    if db.exists() {
        return Err(Error::Other(format!(
            "a new {} appeared during the rebuild (a Hermes process started?); the rebuilt store is {}: \
             stop Hermes and move it into place by hand",
            db.display(),
            fresh.display()
        )));
    }
    for suffix in ["", "-wal", "-shm"] {
        let from = with_suffix(&fresh, suffix);
        if from.exists() {
            let to = with_suffix(db, suffix);
            std::fs::rename(&from, &to).map_err(|e| Error::io(&from, e))?;
        }
    }
    let mut store = Store::open(db)?;
    store.set_prices(prices);
    let recovered = crate::spool::recover(&mut store, dir, None, DecodeOptions::default());
    store.checkpoint()?;
    println!(
        "rebuilt {}: {} journal events read, {} applied, {} unreadable, {} undecodable; {} events from {} spool file(s)",
        db.display(),
        rebuilt.journal_read,
        rebuilt.applied,
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
    let now = crate::unix_now();
    health.fault(FaultKind::Corrupt, format!("{} was damaged", db.display()), now);
    health.recovered(now);
    let _ = health.write(dir, now);
    Ok(0)
}

/// Notes in `<store>/health.json` that the file is damaged, so `status`
/// says so too.
fn record_fault(dir: &Path, db: &Path, first: &str) {
    let mut health = Tracker::default();
    let now = crate::unix_now();
    let text = format!(
        "{} is damaged ({first}); {}",
        db.display(),
        FaultKind::Corrupt.advice(db)
    );
    health.fault(FaultKind::Corrupt, text, now);
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
    let Ok(entries) = std::fs::read_dir(dir.join(crate::spool::SPOOL_DIR_NAME)) else {
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
