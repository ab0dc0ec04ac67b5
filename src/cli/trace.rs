//! `hermes-meter trace`: one session's spans as a tree in the terminal.
//!
//! Owns: the arguments, colour choice and printing. The tree itself is
//! [`crate::trace`], built from the same rows and span code as the export.

use std::io::IsTerminal;

use clap::Args;

use hermes_meter_model::span::SpanOptions;
use hermes_meter_runtime::export::{ExportConfig, ExportOverrides};
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::Reader;

#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// The Hermes session id (a subagent's id shows its own subtree).
    #[arg(required_unless_present = "last", conflicts_with = "last")]
    pub session_id: Option<String>,
    /// The newest session that is not a subagent.
    #[arg(long)]
    pub last: bool,
    /// Print the tree as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The span options the exporter would use (trace mode, sender), from the
/// same settings, so ids and parents match the exported spans.
pub(super) fn span_options() -> SpanOptions {
    let config = ExportConfig::from_env(ExportOverrides::default());
    SpanOptions {
        mode: config.trace_mode.value,
        include_sender: config.include_sender.value,
        names: config.names.value,
    }
}

/// Whether to colour: a terminal on stdout and no `NO_COLOR`.
fn use_color() -> bool {
    let no_color = hermes_meter_runtime::config::cli::no_color();
    !no_color && std::io::stdout().is_terminal()
}

/// Prints the tree; 1 with one line on stderr for an unknown session.
pub(super) fn run(store: &Reader, args: &TraceArgs) -> Result<i32> {
    let id = match (&args.session_id, args.last) {
        (Some(id), _) => id.clone(),
        (None, _) => match store.last_session_id()? {
            Some(id) => id,
            None => {
                eprintln!("hermes-meter: no sessions recorded yet in {}", store.path().display());
                return Ok(1);
            }
        },
    };
    let Some(trace) = crate::trace::load(store, &id, span_options())? else {
        eprintln!("hermes-meter: no session {id:?} in {}", store.path().display());
        return Ok(1);
    };
    if args.json {
        let text = serde_json::to_string_pretty(&trace).map_err(|e| Error::Other(e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", crate::trace::render_text(&trace, use_color()));
    }
    Ok(0)
}
