//! Starts the viewer on a free loopback port over a store directory.

use std::path::Path;

use hermes_meter::ui::trace_link::TraceLink;
use hermes_meter::ui::{UiConfig, UiServer};
use hermes_meter_model::span::SpanOptions;

/// The viewer of the store in `dir`, reading Hermes's `state.db` in
/// `hermes_home` and linking traces with `trace_link`; no token.
pub fn start(dir: &Path, hermes_home: Option<&Path>, trace_link: Option<TraceLink>) -> UiServer {
    UiServer::start(UiConfig {
        listen: "127.0.0.1:0".into(),
        store_dir: dir.to_path_buf(),
        token: None,
        span_options: SpanOptions::default(),
        base: String::new(),
        hermes_home: hermes_home.map(Path::to_path_buf),
        trace_link,
    })
    .expect("viewer starts")
}
