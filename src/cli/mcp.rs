//! `hermes-meter mcp`: the store over the Model Context Protocol on stdio,
//! for any MCP client (a coding assistant, an operator's agent). Read-only
//! tools: the spend and budgets (`spend`), a window's report (`report`), a
//! session's span tree (`session_trace`) and session searches
//! (`search_sessions`; `find_sessions`, by a tool or failures). rmcp (the
//! protocol's own Rust SDK) speaks the protocol; this file only answers.
//!
//! Every argument is untrusted: times go through the CLI's parser, texts
//! and ids are bounded, lists are capped, and an answer larger than
//! [`MOST_ANSWER_BYTES`] is refused with what to use instead. A bad
//! argument is a tool error the client reads, never a crash.

use std::path::PathBuf;

use jiff::tz::TimeZone;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};

use hermes_meter_model::span::SpanOptions;
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::{Reader, SessionFilter, SessionSort, DB_FILE_NAME};

/// The longest answer sent (JSON text): a larger one is refused.
pub(crate) const MOST_ANSWER_BYTES: usize = 1 << 20;

/// The longest id or filter text taken.
const MOST_TEXT_CHARS: usize = 256;

/// Most sessions `search_sessions` returns at once.
const MOST_SESSIONS: u32 = 50;

/// `spend`'s arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpendArgs {
    /// A session id: its cost and tokens (with its subagents) come first,
    /// and in a gateway store the answer is scoped to that session's user.
    #[serde(default)]
    session_id: Option<String>,
}

/// `report`'s arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReportArgs {
    /// Start of the window: a date (midnight, local), an RFC 3339 time, or a span back from now (7d, 24h).
    #[serde(default)]
    since: Option<String>,
    /// End of the window (exclusive), same forms.
    #[serde(default)]
    until: Option<String>,
    /// Rows per grouping (1 - 50, default 10).
    #[serde(default)]
    top: Option<u32>,
}

/// `advise`'s arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdviseArgs {
    /// Start of the window: a date, an RFC 3339 time, or a span back from now (default 7d).
    #[serde(default)]
    since: Option<String>,
    /// End of the window (exclusive), same forms (default now).
    #[serde(default)]
    until: Option<String>,
}

/// `session_trace`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TraceArgs {
    /// The Hermes session id.
    session_id: String,
}

/// `search_sessions`' arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchArgs {
    /// Sessions started at or after: a date, an RFC 3339 time, or a span back from now (7d).
    #[serde(default)]
    since: Option<String>,
    /// Sessions started before, same forms.
    #[serde(default)]
    until: Option<String>,
    /// A text the model's name contains (any case).
    #[serde(default)]
    model: Option<String>,
    /// A text the platform contains (cli, cron, telegram, ...).
    #[serde(default)]
    platform: Option<String>,
    /// A text the cron job id contains.
    #[serde(default)]
    cron_job: Option<String>,
    /// A text the gateway user id contains.
    #[serde(default)]
    sender: Option<String>,
    /// newest (default), cost or duration.
    #[serde(default)]
    sort: Option<String>,
    /// How many (1 - 50, default 20).
    #[serde(default)]
    limit: Option<u32>,
}

/// `find_sessions`' arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FindArgs {
    /// Sessions started at or after (default: 7 days ago), same forms as `report`.
    #[serde(default)]
    since: Option<String>,
    /// Sessions started before (default: now).
    #[serde(default)]
    until: Option<String>,
    /// A text the name of a tool the session ran contains (any case).
    #[serde(default)]
    tool: Option<String>,
    /// Only sessions with an API error or a failed tool call.
    #[serde(default)]
    failed: bool,
    /// How many, newest first (1 - 50, default 20).
    #[serde(default)]
    limit: Option<u32>,
}

/// How far back `find_sessions` looks without `since`.
const FIND_DEFAULT_SECONDS: f64 = 7.0 * 86_400.0;

/// The server: the store directory and the exporter's span options.
#[derive(Clone)]
pub(crate) struct MeterMcp {
    dir: PathBuf,
    opts: SpanOptions,
    #[allow(dead_code, reason = "read by the code #[tool_handler] generates")]
    tool_router: ToolRouter<Self>,
}

/// A tool's answer: JSON text, or a tool error the client reads.
fn answer(result: std::result::Result<Value, String>) -> CallToolResult {
    match result {
        Ok(value) => {
            let text = value.to_string();
            if text.len() > MOST_ANSWER_BYTES {
                return CallToolResult::error(vec![ContentBlock::text(format!(
                    "the answer is {} bytes, over the {MOST_ANSWER_BYTES} this server sends: narrow the window or \
                     the search, or run `hermes-meter` itself",
                    text.len()
                ))]);
            }
            CallToolResult::success(vec![ContentBlock::text(text)])
        }
        Err(why) => CallToolResult::error(vec![ContentBlock::text(why)]),
    }
}

/// `text` if it is short enough to be an id or a filter.
fn bounded<'a>(name: &str, text: &'a Option<String>) -> std::result::Result<Option<&'a str>, String> {
    match text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) if t.chars().count() > MOST_TEXT_CHARS => {
            Err(format!("{name} is longer than {MOST_TEXT_CHARS} characters"))
        }
        other => Ok(other),
    }
}

/// A time argument through the command line's parser.
fn time_arg(name: &str, text: &Option<String>, tz: &TimeZone, now: f64) -> std::result::Result<Option<f64>, String> {
    match bounded(name, text)? {
        Some(t) => super::time::parse(t, tz, now)
            .map(Some)
            .map_err(|e| format!("{name}: {e}")),
        None => Ok(None),
    }
}

#[tool_router]
impl MeterMcp {
    pub(crate) fn new(dir: PathBuf, opts: SpanOptions) -> Self {
        MeterMcp {
            dir,
            opts,
            tool_router: Self::tool_router(),
        }
    }

    fn reader(&self) -> std::result::Result<Reader, String> {
        Reader::open(&self.dir.join(DB_FILE_NAME)).map_err(|e| e.to_string())
    }

    #[tool(
        description = "Spend from the hermes-meter ledger: today's cost and tokens, each budget's limit, what is left \
                       and when its window resets, the costliest sessions and most used tools of the last 7 days; \
                       with session_id, that session first. Read-only; no prompt or output is ever included."
    )]
    async fn spend(&self, Parameters(args): Parameters<SpendArgs>) -> std::result::Result<CallToolResult, ErrorData> {
        let result = bounded("session_id", &args.session_id).and_then(|id| {
            hermes_meter_runtime::agent_tool::answer(&self.dir, id, hermes_meter_store::unix_now(), &TimeZone::system())
                .map_err(|e| e.to_string())
        });
        Ok(answer(result))
    }

    #[tool(
        description = "hermes-meter's report of a window: totals (cost, tokens, LLM and tool calls, errors) and the \
                       top rows by day, model, provider, sender, cron job and session."
    )]
    async fn report(&self, Parameters(args): Parameters<ReportArgs>) -> std::result::Result<CallToolResult, ErrorData> {
        let tz = TimeZone::system();
        let now = hermes_meter_store::unix_now();
        let result = (|| {
            let since = time_arg("since", &args.since, &tz, now)?.unwrap_or(0.0);
            let until = time_arg("until", &args.until, &tz, now)?.unwrap_or(now + 1.0);
            if until <= since {
                return Err("until is not after since: the window is empty".to_string());
            }
            let top = args.top.unwrap_or(10).clamp(1, 50) as usize;
            let report = self
                .reader()?
                .report(&tz, since, until, Some(top))
                .map_err(|e| e.to_string())?;
            serde_json::to_value(&report).map_err(|e| e.to_string())
        })();
        Ok(answer(result))
    }

    #[tool(
        description = "The largest savings the ledger shows over a window (default the last 7 days), largest first: \
                       context re-sent without the prompt cache, near-runaway tool streaks, a model priced far above \
                       another the same kind of session uses; each with its estimate in USD and its sessions."
    )]
    async fn advise(&self, Parameters(args): Parameters<AdviseArgs>) -> std::result::Result<CallToolResult, ErrorData> {
        let tz = TimeZone::system();
        let now = hermes_meter_store::unix_now();
        let result = (|| {
            let since = time_arg("since", &args.since, &tz, now)?.unwrap_or(now - 7.0 * 86_400.0);
            let until = time_arg("until", &args.until, &tz, now)?.unwrap_or(now);
            if until <= since {
                return Err("until is not after since: the window is empty".to_string());
            }
            let advice = hermes_meter_runtime::advise::advise(&self.reader()?, &self.dir, since, until)
                .map_err(|e| e.to_string())?;
            serde_json::to_value(&advice).map_err(|e| e.to_string())
        })();
        Ok(answer(result))
    }

    #[tool(
        description = "One session's span tree as hermes-meter builds it for export: turns, LLM attempts (retries and \
                       errors with reasons), tool calls, subagents, with durations, tokens and cost."
    )]
    async fn session_trace(
        &self,
        Parameters(args): Parameters<TraceArgs>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let id = Some(args.session_id);
        let result = bounded("session_id", &id).and_then(|id| {
            let id = id.ok_or("session_id is empty")?;
            let store = self.reader()?;
            match crate::trace::load(&store, id, self.opts).map_err(|e| e.to_string())? {
                Some(trace) => serde_json::to_value(&trace).map_err(|e| e.to_string()),
                None => Err(format!(
                    "no session {} in this store",
                    hermes_meter_model::display::escape(id)
                )),
            }
        });
        Ok(answer(result))
    }

    #[tool(
        description = "Sessions that ran a tool whose name contains a text, or that had an API error or a failed \
                       tool call (failed: true), newest first; started in the last 7 days unless since says."
    )]
    async fn find_sessions(
        &self,
        Parameters(args): Parameters<FindArgs>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let tz = TimeZone::system();
        let now = hermes_meter_store::unix_now();
        let result = (|| {
            let since = time_arg("since", &args.since, &tz, now)?.unwrap_or(now - FIND_DEFAULT_SECONDS);
            let until = time_arg("until", &args.until, &tz, now)?.unwrap_or(now + 1.0);
            if until <= since {
                return Err("until is not after since: the window is empty".to_string());
            }
            let tool = bounded("tool", &args.tool)?;
            if tool.is_none() && !args.failed {
                return Err("say a tool (a text its name contains), or failed: true".to_string());
            }
            let limit = args.limit.unwrap_or(20).clamp(1, MOST_SESSIONS) as usize;
            let found = self
                .reader()?
                .sessions_by_tool_or_failure(since, until, tool, args.failed, limit)
                .map_err(|e| e.to_string())?;
            Ok(json!({ "sessions": found }))
        })();
        Ok(answer(result))
    }

    #[tool(
        description = "Sessions (newest first, or by cost or duration) filtered by start time and by texts their \
                       model, platform, cron job or gateway user contain, with the totals of all that match."
    )]
    async fn search_sessions(
        &self,
        Parameters(args): Parameters<SearchArgs>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let tz = TimeZone::system();
        let now = hermes_meter_store::unix_now();
        let result = (|| {
            let text = |name: &str, t: &Option<String>| bounded(name, t).map(|t| t.map(str::to_string));
            let sort = match bounded("sort", &args.sort)? {
                None => SessionSort::Newest,
                Some(s) => SessionSort::parse(s).ok_or("sort is one of newest, cost, duration")?,
            };
            let filter = SessionFilter {
                since: time_arg("since", &args.since, &tz, now)?,
                until: time_arg("until", &args.until, &tz, now)?,
                platform: text("platform", &args.platform)?,
                cron_job_id: text("cron_job", &args.cron_job)?,
                sender_id: text("sender", &args.sender)?,
                model: text("model", &args.model)?,
                sort,
                limit: args.limit.unwrap_or(20).clamp(1, MOST_SESSIONS) as usize,
                ..SessionFilter::default()
            };
            let index = self.reader()?.session_index(&filter, &[]).map_err(|e| e.to_string())?;
            let (rows, totals) = (index.rows, index.totals);
            let matched: serde_json::Map<String, Value> = index
                .values
                .dims
                .into_iter()
                .map(|(name, _, values)| (name.to_string(), json!(values)))
                .collect();
            Ok(json!({ "sessions": rows, "totals": totals, "filters_matched": matched }))
        })();
        Ok(answer(result))
    }
}

#[tool_handler]
impl ServerHandler for MeterMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("hermes-meter", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Read-only questions to a Hermes agent's spend ledger (hermes-meter): what was spent and by what, \
                 what budgets have left, and what a session did.",
            )
    }
}

/// `hermes-meter mcp`: stdio, or HTTP with `--listen`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct McpArgs {
    /// Serve over HTTP (MCP's streamable HTTP, at /mcp) on this address
    /// instead of stdin/stdout: loopback unless a token is set (port 0: any free port).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// The token every HTTP request must carry (Authorization: Bearer); also HERMES_METER_MCP_TOKEN.
    #[arg(long)]
    token: Option<String>,
}

/// Serves on stdin/stdout until the client closes them, or over HTTP.
pub(super) fn run(dir: PathBuf, args: &McpArgs) -> Result<i32> {
    if let Some(addr) = args.listen {
        let token = hermes_meter_runtime::config::cli::mcp_token(args.token.clone());
        return super::mcp_http::serve(dir, addr, token);
    }
    let server = MeterMcp::new(dir, super::trace::span_options());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Other(format!("mcp: {e}")))?;
    rt.block_on(async move {
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| Error::Other(format!("mcp: {e}")))?;
        running.waiting().await.map_err(|e| Error::Other(format!("mcp: {e}")))?;
        Ok::<(), Error>(())
    })?;
    Ok(0)
}
