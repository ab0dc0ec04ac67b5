//! `hermes-meter ui`: starts the viewer ([`crate::ui`]) and prints where.

use std::path::Path;

use clap::Args;

use crate::ui::trace_link::TraceLink;
use crate::ui::{UiConfig, UiServer, DEFAULT_LISTEN};
use hermes_meter_store::error::Result;

#[derive(Debug, Args)]
pub(crate) struct UiArgs {
    /// Address to listen on; anything but loopback needs a token.
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "HOST:PORT")]
    pub listen: String,
    /// Access token every request must carry (also $HERMES_METER_UI_TOKEN).
    #[arg(long)]
    pub token: Option<String>,
    /// Serve the pages under this path prefix (behind a proxy).
    #[arg(long, default_value = "", value_name = "PATH")]
    pub base_path: String,
    /// Set by Hermes's dashboard tab, which runs the viewer inside a Hermes
    /// process: Hermes's own session database is not opened there.
    #[arg(long, hide = true)]
    pub in_hermes: bool,
    /// Where a session page links its trace: a Jaeger address, or any trace
    /// UI's with {trace_id} where the id goes (also $HERMES_METER_TRACE_URL;
    /// empty for no link). Default: Jaeger on the OTLP endpoint's host.
    #[arg(long, value_name = "URL")]
    pub trace_url: Option<String>,
}

/// Serves until the process is stopped.
pub(super) fn run(dir: &Path, args: &UiArgs) -> Result<i32> {
    let token = hermes_meter_runtime::config::cli::ui_token(args.token.clone());
    let export =
        hermes_meter_runtime::export::ExportConfig::from_env(hermes_meter_runtime::export::ExportOverrides::default());
    let endpoint = export.configured().then(|| export.endpoint.value.clone());
    let server = UiServer::start(UiConfig {
        listen: args.listen.clone(),
        store_dir: dir.to_path_buf(),
        token: token.clone(),
        span_options: super::trace::span_options(),
        base: args.base_path.clone(),
        hermes_home: (!args.in_hermes).then(|| hermes_meter_runtime::config::hermes_home().value),
        trace_link: TraceLink::from_settings(args.trace_url.clone(), endpoint.as_deref()),
    })?;
    let addr = server.addr();
    let base = args.base_path.trim_end_matches('/');
    match token.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => println!(
            "hermes-meter viewer on http://{addr}{base}/?token={}",
            crate::ui::html::url_part(t)
        ),
        None => println!("hermes-meter viewer on http://{addr}{base}/"),
    }
    println!("store {}; read-only; Ctrl-C stops it", dir.display());
    server.wait();
    Ok(0)
}
