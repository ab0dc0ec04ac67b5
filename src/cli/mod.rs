//! The `hermes-otel` command line.
//!
//! Owns: argument parsing and printing. The same entry point serves the
//! Rust binary and the `hermes-otel` script the Python wheel installs.

mod budget;
mod doctor;
mod export;
mod metrics_status;
mod report;
mod status;
mod time;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config;
use crate::error::Result;
use crate::hook::DecodeOptions;
use crate::pricing::PriceTable;
use crate::store::Store;

/// Default idle time after which a run that never ended is closed as abandoned.
pub const DEFAULT_IDLE_TIMEOUT_SECONDS: f64 = 15.0 * 60.0;

#[derive(Debug, Parser)]
#[command(
    name = "hermes-otel",
    version,
    about = "OpenTelemetry bridge and spend ledger for the Hermes Agent"
)]
struct Cli {
    /// Store directory (default: $HERMES_OTEL_HOME, else $HERMES_HOME/otel, else ~/.hermes/otel).
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,

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
    /// Where the store is, its schema version and row counts.
    Status {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
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
}

/// Runs the CLI with `args` (including the program name) and returns the
/// process exit code.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hermes-otel: {e}");
            1
        }
    }
}

fn open_store(home: Option<PathBuf>) -> Result<Store> {
    let dir = config::store_dir(home).value;
    let mut store = Store::open_dir(&dir)?;
    store.set_prices(PriceTable::load(&dir.join(config::PRICING_FILE_NAME))?);
    // Events of Hermes processes that died before committing them are in
    // their spools; a report must include them.
    let recovered = crate::spool::recover(&mut store, &dir, None, DecodeOptions::default());
    for e in &recovered.errors {
        eprintln!("hermes-otel: spool: {e}");
    }
    Ok(store)
}

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Replay { files, capture_content } => {
            let mut store = open_store(cli.home)?;
            let opts = DecodeOptions {
                capture_content,
                ..DecodeOptions::default()
            };
            let mut stats = crate::replay::ReplayStats::default();
            for file in &files {
                crate::replay::replay_file(&mut store, file, opts, &mut stats)?;
            }
            store.close_idle_runs(time::now(), DEFAULT_IDLE_TIMEOUT_SECONDS)?;
            store.checkpoint()?;
            for bad in &stats.bad_lines {
                eprintln!("hermes-otel: {bad}");
            }
            println!(
                "replayed {} records: {} applied, {} already present, {} ignored hooks, {} unusable, {} repaired kwargs",
                stats.records, stats.applied, stats.duplicates, stats.ignored, stats.unusable, stats.problems
            );
            Ok(if stats.bad_lines.is_empty() { 0 } else { 2 })
        }
        Command::Report(args) => {
            let store = open_store(cli.home)?;
            report::run(&store, &args)
        }
        Command::Serve(args) => export::serve(&config::store_dir(cli.home).value, &args),
        Command::Export(args) => export::export(&config::store_dir(cli.home).value, &args),
        Command::Doctor(args) => doctor::run(&config::store_dir(cli.home).value, &args),
        Command::Budget { command } => budget::run(&config::store_dir(cli.home).value, &command),
        Command::Status { json } => {
            let home = config::store_dir(cli.home);
            // A store in trouble is exactly when status must answer: one
            // that cannot be opened, or whose pages fail to read.
            match Store::open_dir(&home.value).and_then(|store| status::run(&store, &home, json)) {
                Ok(code) => Ok(code),
                Err(e) if crate::health::classify(&e).is_some() => status::run_unopenable(&home, &e, json),
                Err(e) => Err(e),
            }
        }
    }
}
