//! The `hermes-meter` command line.
//!
//! Owns: argument parsing and printing. The same entry point serves the
//! Rust binary and the `hermes-meter` script the Python wheel installs.
//!
//! Output to a closed stdout (`hermes-meter status | head -1`) is not an
//! error: `println!` below stops writing once the reader went away and the
//! command ends with exit 0, as `cat` and `ls` do. Any other failed write
//! (a full disk, an I/O error) is: the command says so on stderr and
//! exits [`EXIT_OUTPUT_FAILED`], whatever it printed before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Set once a write to stdout failed (the reader closed the pipe, or the
/// write failed otherwise); later output is dropped. Reset at the start of
/// every [`run`].
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Why a write to stdout failed, when the reader did not just go away.
static STDOUT_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// The exit code of a command whose output could not be written
/// (`EX_IOERR` of sysexits.h).
pub const EXIT_OUTPUT_FAILED: i32 = 74;

/// The commands' `println!`: like std's, except that a closed stdout is
/// noted in [`STDOUT_CLOSED`] instead of panicking (std's panics on EPIPE,
/// which ended `status | head -1` with exit 101).
macro_rules! println {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// The commands' `print!`; see [`println!`].
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

/// Set while the CLI runs inside a Hermes process (`hermes meter ...`):
/// process-wide things that belong to the host (signal handlers) are left
/// alone then.
static EMBEDDED: AtomicBool = AtomicBool::new(false);

/// Tells the CLI whether it runs inside a process that hosts the plugin.
pub fn set_embedded(embedded: bool) {
    EMBEDDED.store(embedded, Ordering::Relaxed);
}

/// Whether the CLI runs inside a Hermes process.
pub(crate) fn embedded() -> bool {
    EMBEDDED.load(Ordering::Relaxed)
}

/// Writes to stdout unless it was found closed; never panics.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            let mut error = STDOUT_ERROR.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            error.get_or_insert_with(|| e.to_string());
        }
    }
}

mod advise;
mod budget;
mod budget_args;
mod budget_file;
mod budget_rates;
mod deliveries;
mod doctor;
mod export;
mod held;
mod logs_status;
mod mcp;
mod mcp_http;
mod metrics_status;
mod pricing;
mod report;
mod status;
mod status_hermes;
mod time;
mod trace;
mod ui;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_runtime::config;
use hermes_meter_store::error::Result;
use hermes_meter_store::{Reader, Writer};

use hermes_meter_runtime::config::DEFAULT_IDLE_TIMEOUT_SECONDS;

#[derive(Debug, Parser)]
#[command(
    name = "hermes-meter",
    version,
    about = "OpenTelemetry bridge and spend ledger for the Hermes Agent"
)]
struct Cli {
    /// Store directory (default: $HERMES_METER_HOME, else $HERMES_HOME/meter, else ~/.hermes/meter).
    /// It must exist, except for `replay` and `budget set`, which create it.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,

    /// More log lines on stderr (-v info, -vv debug, -vvv trace); overrides HERMES_METER_LOG.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,

    /// Fewer log lines on stderr (-q errors only, -qq none); overrides HERMES_METER_LOG.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    quiet: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply recorded hook calls (JSON lines: {"hook": ..., "kwargs": {...}}) to the store.
    Replay {
        /// Files to replay, in order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Keep prompts, responses and tool arguments in the journal.
        #[arg(long)]
        capture_content: bool,
    },
    /// Spend and tokens by day, model, provider, sender, cron job and session.
    Report(report::ReportArgs),
    /// The largest savings the ledger shows (uncached re-sent context, near-runaway streaks, a dearer model for the same work).
    Advise(advise::AdviseArgs),
    /// What is wrong first (sessions Hermes ran unrecorded, loads it abandoned, export off or failing), then the store, its export and the Hermes side.
    Status {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Build report's rollups, then rewrite the store file to give back the space retention freed (holds the store's write lock while it runs).
    Compact,
    /// Export spans from the store until stopped (one exporter per store).
    Serve(export::ServeArgs),
    /// Re-send every finished span since a time, with the same ids as before.
    Export(export::ExportArgs),
    /// Check the store file's integrity; --rebuild rebuilds a damaged one.
    Doctor(doctor::DoctorArgs),
    /// Budgets: set limits, list spend and verdicts, forecast.
    Budget {
        #[command(subcommand)]
        command: budget::BudgetCommand,
    },
    /// Calls whose usage was beyond what any provider bills in one call: list them, confirm real ones.
    Held {
        #[command(subcommand)]
        command: held::HeldCommand,
    },
    /// Prices: the one a model gets and why, updates from a price list, drift from Hermes's own.
    Pricing {
        #[command(subcommand)]
        command: pricing::PricingCommand,
    },
    /// One session's spans as a tree: turns, attempts, tools, subagents.
    Trace(trace::TraceArgs),
    /// A local read-only web viewer: sessions, their spans, budgets.
    Ui(ui::UiArgs),
    /// The store for MCP clients, on stdin/stdout or HTTP: spend, budgets, reports, a session's spans, a session search (read-only).
    Mcp(mcp::McpArgs),
}

/// Runs the CLI with `args` (including the program name) and returns the
/// process exit code.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    STDOUT_CLOSED.store(false, Ordering::Relaxed);
    *STDOUT_ERROR.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    init_logging(cli.verbose, cli.quiet);
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            if hermes_meter_store::health::classify(&e) == Some(hermes_meter_store::health::FaultKind::Corrupt) {
                eprintln!(
                    "hermes-meter: {e}: the store is damaged; `hermes-meter doctor` checks it and \
                     `hermes-meter doctor --rebuild` rebuilds it"
                );
            } else {
                eprintln!("hermes-meter: {e}");
            }
            1
        }
    };
    // The output could not be written (a full disk): nothing may take it
    // for a complete answer.
    let failed = STDOUT_ERROR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(e) = failed {
        eprintln!("hermes-meter: the output could not be written: {e}");
        return if code == 0 { EXIT_OUTPUT_FAILED } else { code };
    }
    // The reader of our output went away (`| head -1`): what it wanted, it
    // got. Like `cat`, end quietly and successfully.
    if STDOUT_CLOSED.load(Ordering::Relaxed) && code == 0 {
        return 0;
    }
    code
}

/// Installs the stderr log subscriber: the level from `-v`/`-q` if given,
/// else [`LOG_ENV`], else `RUST_LOG`, else warnings and errors. Our events
/// are named `Component.Event` (their target), so `Export=debug` selects
/// the exporter's. Inside Hermes a subscriber that forwards to Python's
/// `logging` is already installed and this one is not (`try_init`).
fn init_logging(verbose: u8, quiet: u8) {
    use tracing_subscriber::EnvFilter;
    let from_flags = match (verbose, quiet) {
        (0, 0) => None,
        (1, _) => Some("info"),
        (2, _) => Some("debug"),
        (v, _) if v > 2 => Some("trace"),
        (_, 1) => Some("error"),
        _ => Some("off"),
    };
    let mut problem = None;
    let filter = match from_flags {
        Some(level) => EnvFilter::new(level),
        None => {
            let (name, text) = hermes_meter_runtime::config::cli::log_filter();
            if text.trim().is_empty() {
                EnvFilter::new("warn")
            } else {
                EnvFilter::try_new(&text).unwrap_or_else(|e| {
                    problem = Some(format!("{name}={text:?} is not a log filter ({e}); using warn"));
                    EnvFilter::new("warn")
                })
            }
        }
    };
    use std::io::IsTerminal as _;
    let installed = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .with_target(true)
        .try_init()
        .is_ok();
    if let (true, Some(p)) = (installed, problem) {
        eprintln!("hermes-meter: {p}");
    }
}

/// The store directory, which must exist: a typo in `--home` (or in
/// `HERMES_METER_HOME`) must not silently make a new, empty store whose
/// report says nothing was spent.
fn existing_home(home: Option<PathBuf>) -> Result<config::Resolved<PathBuf>> {
    let resolved = config::store_dir(home);
    // Nor may any command make one beside a damaged store kept aside.
    if let Some(line) = hermes_meter_store::missing_beside_aside(&resolved.value) {
        return Err(hermes_meter_store::error::Error::Other(line));
    }
    if !resolved.value.is_dir() {
        return Err(hermes_meter_store::error::Error::Other(format!(
            "no store at {} (from {}): check the path; Hermes with the plugin, or `hermes-meter replay`, creates it",
            resolved.value.display(),
            resolved.source
        )));
    }
    Ok(resolved)
}

/// Opens the store for a command that only reads it: as every command
/// does (migrating it, applying dead processes' spools), or, when the
/// store cannot be written (a read-only file, directory or mount),
/// read-only, saying so in one line.
fn open_for_reading(dir: PathBuf) -> Result<Reader> {
    let db = dir.join(hermes_meter_store::DB_FILE_NAME);
    // Asked first: SQLite opens a store in a directory that cannot hold its
    // `-shm` as if it could be written, and fails at the first write.
    let store = match db
        .exists()
        .then(|| hermes_meter_store::Doctor::new(&db).check_writable())
        .flatten()
    {
        Some(why) => {
            let store = Reader::open(&db)?;
            eprintln!(
                "hermes-meter: the store cannot be written ({why}): read as it is, without the events of \
                 ended processes' spools"
            );
            store
        }
        None => open_store(dir)?.into_reader(),
    };
    // A few pages per table: damage a query of this command may never
    // touch is still said, in one line.
    if let Some(first) = hermes_meter_store::Doctor::new(&db).quick_look().first() {
        eprintln!(
            "hermes-meter: the store is damaged ({first}); `hermes-meter doctor` checks it and \
             `hermes-meter doctor --rebuild` rebuilds it"
        );
    }
    Ok(store)
}

fn open_store(dir: PathBuf) -> Result<Writer> {
    let mut store = Writer::open_dir(&dir)?;
    store.set_prices(config::load_prices(&dir.join(config::PRICING_FILE_NAME))?);
    // Events of Hermes processes that died before committing them are in
    // their spools; a report must include them.
    let recovered = hermes_meter_runtime::spool::recover(&mut store, &dir, None, DecodeOptions::default());
    for e in &recovered.errors {
        eprintln!("hermes-meter: spool: {e}");
    }
    Ok(store)
}

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Replay { files, capture_content } => {
            // Every input must be readable before the store is created: a
            // mistyped file name must not leave an empty store behind.
            for file in &files {
                std::fs::File::open(file).map_err(|e| hermes_meter_store::error::Error::io(file, e))?;
            }
            let dir = config::store_dir(cli.home).value;
            if let Some(line) = hermes_meter_store::missing_beside_aside(&dir) {
                eprintln!("hermes-meter: {line}; replaying into a new store");
            }
            let mut store = open_store(dir)?;
            let opts = DecodeOptions {
                capture_content,
                ..DecodeOptions::default()
            };
            let mut stats = hermes_meter_store::replay::ReplayStats::default();
            for file in &files {
                hermes_meter_store::replay::replay_file(&mut store, file, opts, &mut stats)?;
            }
            store.close_idle_runs(hermes_meter_store::unix_now(), DEFAULT_IDLE_TIMEOUT_SECONDS)?;
            store.checkpoint()?;
            for bad in &stats.bad_lines {
                eprintln!("hermes-meter: {bad}");
            }
            println!(
                "replayed {} records: {} applied, {} already present, {} ignored hooks, {} unusable, {} repaired kwargs",
                stats.records, stats.applied, stats.duplicates, stats.ignored, stats.unusable, stats.problems
            );
            if stats.too_old > 0 {
                println!(
                    "{} events older than the journal's retention were not applied (the store no longer \
                     keeps the keys that would tell whether it has them)",
                    stats.too_old
                );
            }
            Ok(if stats.bad_lines.is_empty() { 0 } else { 2 })
        }
        Command::Report(args) => {
            // Arguments first: a bad window is reported before any store work.
            let window = report::window(&args)?;
            let dir = existing_home(cli.home)?.value;
            let store = open_for_reading(dir.clone())?;
            report::run(&store, &dir, &args, window)
        }
        Command::Advise(args) => {
            let dir = existing_home(cli.home)?.value;
            let store = open_for_reading(dir.clone())?;
            advise::run(&store, &dir, &args)
        }
        Command::Serve(args) => export::serve(&existing_home(cli.home)?.value, &args),
        Command::Export(args) => export::export(&existing_home(cli.home)?.value, &args),
        Command::Budget { command } => {
            let dir = if command.creates_home() {
                config::store_dir(cli.home).value
            } else {
                existing_home(cli.home)?.value
            };
            budget::run(&dir, &command)
        }
        // Prices need no store: pricing.toml lives in the store directory,
        // which `update` creates like `budget set` does.
        Command::Pricing { command } => pricing::run(&config::store_dir(cli.home).value, &command),
        Command::Held { command } => {
            let home = existing_home(cli.home)?.value;
            match &command {
                held::HeldCommand::List { limit, json } => held::list(&open_for_reading(home)?, *limit, *json),
                held::HeldCommand::Confirm { ids } => held::confirm(&mut open_store(home)?, ids),
            }
        }
        Command::Doctor(args) => doctor::run(&existing_home(cli.home)?.value, &args),
        Command::Trace(args) => {
            let store = open_for_reading(existing_home(cli.home)?.value)?;
            trace::run(&store, &args)
        }
        Command::Ui(args) => ui::run(&existing_home(cli.home)?.value, &args),
        Command::Mcp(args) => mcp::run(existing_home(cli.home)?.value, &args),
        Command::Compact => {
            let home = existing_home(cli.home)?;
            let mut store = Writer::open_dir(&home.value)?;
            // The report rollups a running Hermes builds a few at a time,
            // all at once (a store filled by `replay`, or upgraded).
            let mut buckets = 0;
            loop {
                let step = store.roll_up(hermes_meter_store::unix_now() - 300.0)?;
                buckets += step.buckets;
                if !step.more {
                    break;
                }
            }
            if buckets > 0 {
                println!("rolled up {buckets} quarter hours for report");
            }
            let (before, after) = store.compact()?;
            println!(
                "compacted {}: {:.1} MB -> {:.1} MB",
                store.path().display(),
                before as f64 / 1e6,
                after as f64 / 1e6
            );
            Ok(0)
        }
        Command::Status { json } => {
            // No store yet is the answer `status` must give when Hermes
            // never ran the plugin here (a load it dropped on the first run).
            let resolved = config::store_dir(cli.home.clone());
            if !resolved.value.exists() && hermes_meter_store::missing_beside_aside(&resolved.value).is_none() {
                return status::run_without_store(&resolved, json);
            }
            let home = existing_home(cli.home)?;
            // A store in trouble is exactly when status must answer: one
            // that cannot be opened, or whose pages fail to read.
            match status_store(&home.value).and_then(|store| status::run(&store, &home, json)) {
                Ok(code) => Ok(code),
                Err(e) if hermes_meter_store::health::classify(&e).is_some() => status::run_unopenable(&home, &e, json),
                Err(e) => Err(e),
            }
        }
    }
}

/// The store as `status` reads it: opened as every command opens it, or
/// read-only when it cannot be written (status then says why).
fn status_store(dir: &std::path::Path) -> Result<Reader> {
    let db = dir.join(hermes_meter_store::DB_FILE_NAME);
    Writer::open_dir(dir).map(Writer::into_reader).or_else(|e| {
        match db
            .exists()
            .then(|| hermes_meter_store::Doctor::new(&db).check_writable())
            .flatten()
        {
            Some(_) => Reader::open(&db),
            None => Err(e),
        }
    })
}
