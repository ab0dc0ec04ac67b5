//! `report`'s `by_session`: every session that started in a window, with
//! everything it spent, most expensive first (ties by id), handed over one
//! at a time from one statement ([`SESSIONS_BY_COST`]).
//!
//! Owns: that statement and the SQL functions it calls, which add up a
//! session's rows of one table with [`Totals::of_fact`], the definition
//! every other report sum uses (tool outcomes included), in the order its
//! session index gives them: so each sum is the one the per-session
//! statement (`SESSION_FACTS`) makes, to the bit.
//!
//! Why SQL sorts: the list is printed most expensive first, and a sum is
//! known only once a session's rows are read. SQLite's sorter holds the
//! sorted rows (a session id and two small blobs each) up to the
//! connection's cache size and spills the rest to a temporary file, so a
//! report of a million sessions holds what a few thousand take, and the
//! caller holds one session at a time.

use rusqlite::functions::{Aggregate, Context, FunctionFlags};
use rusqlite::{params, Connection};

use super::Reader;
use crate::error::Result;
use hermes_meter_model::report::{FactKind, FactRow, Totals};
use hermes_meter_model::tool_outcome::ToolOutcome;

/// The aggregate of a session's LLM calls: `(cost_usd, input_tokens,
/// output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
/// estimated, unpriced, auxiliary)` → their [`Totals`] as a blob.
const LLM_TOTALS: &str = "hermes_llm_totals";
/// The aggregate of a session's finished tool calls: `(status, ok,
/// exit_code)` → their [`Totals`] as a blob.
const TOOL_TOTALS: &str = "hermes_tool_totals";
/// A blob's cost, what the list is sorted by (0 for no blob: no calls).
const TOTALS_COST: &str = "hermes_totals_cost";

/// Every session that started in `[?1, ?2)`: its id, the sums of its LLM
/// calls and of its tool calls (blobs, NULL where it has none) and its
/// failed attempts, most expensive first, ties by id (`by_cost` in
/// `report.rs`: SQLite's text order is Rust's byte order, and a sum is
/// never NaN or -0). Each session's rows are read through its table's
/// session index, and only for the kinds its run counts any of: run
/// totals count every row (an invariant, ARCHITECTURE.md), and most
/// sessions have no failed attempts and many no tool calls, so this skips
/// most of the seeks. The inner select stays a co-routine (`OFFSET 0`
/// keeps SQLite from flattening it), so each sum is computed once, not
/// once more for the sort key.
pub(super) const SESSIONS_BY_COST: &str = "
    SELECT session_id, llm, tools, errors FROM (
      SELECT r.session_id,
             CASE WHEN r.llm_calls != 0 THEN
               (SELECT hermes_llm_totals(l.cost_usd, l.input_tokens, l.output_tokens, l.cache_read_tokens,
                                         l.cache_write_tokens, l.reasoning_tokens, l.estimated,
                                         l.cost_source = 'unknown', l.aux_task IS NOT NULL)
                  FROM llm_calls l WHERE l.session_id = r.session_id) END AS llm,
             CASE WHEN r.tool_calls != 0 THEN
               (SELECT hermes_tool_totals(t.status, t.ok, t.exit_code)
                  FROM tool_calls t
                 WHERE t.session_id = r.session_id AND t.ended_at IS NOT NULL AND t.proxy = 0) END AS tools,
             CASE WHEN r.api_errors != 0 THEN
               (SELECT COUNT(*) FROM llm_call_errors e WHERE e.session_id = r.session_id) ELSE 0 END AS errors
        FROM runs r WHERE r.started_at >= ?1 AND r.started_at < ?2
       LIMIT -1 OFFSET 0)
     ORDER BY hermes_totals_cost(llm) DESC, session_id";

/// Registers the functions [`SESSIONS_BY_COST`] calls on `conn`.
pub(super) fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_aggregate_function(LLM_TOTALS, 9, flags, FactTotals(llm_fact))?;
    conn.create_aggregate_function(TOOL_TOTALS, 3, flags, FactTotals(tool_fact))?;
    conn.create_scalar_function(TOTALS_COST, 1, flags, |ctx| {
        Ok(ctx.get_raw(0).as_blob_or_null()?.map_or(0.0, cost_of_blob))
    })
}

impl Reader {
    /// Hands every session that started in `[since, until)` to `each`, most
    /// expensive first (ties by id), with everything it spent, holding none
    /// of them (see the module docs); stops at the first error `each`
    /// returns.
    pub fn for_each_session_by_cost(
        &self,
        since: f64,
        until: f64,
        mut each: impl FnMut(&str, Totals) -> Result<()>,
    ) -> Result<()> {
        let mut stmt = self.conn().prepare_cached(SESSIONS_BY_COST)?;
        let mut rows = stmt.query(params![since, until])?;
        while let Some(r) = rows.next()? {
            let session = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
            // As the per-session statement adds them up: from a session's
            // start, its LLM calls, then failed attempts and tool calls,
            // which add no cost.
            let mut totals = Totals::one_session();
            for blob in [1, 2] {
                if let Some(b) = r.get_ref(blob)?.as_blob_or_null().map_err(rusqlite::Error::from)? {
                    totals.add(&totals_of_blob(b));
                }
            }
            totals.api_errors += r.get::<_, i64>(3)?;
            each(session, totals)?;
        }
        Ok(())
    }
}

/// A fact of `kind` with nothing in it, for the aggregates to fill in what
/// [`Totals::of_fact`] reads.
fn blank_fact(kind: FactKind) -> FactRow {
    FactRow {
        kind,
        at: 0.0,
        session_id: String::new(),
        model: None,
        provider: None,
        sender_id: None,
        cron_job_id: None,
        input_tokens: 0,
        output_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
        cost_usd: 0.0,
        estimated: false,
        unpriced: false,
        tool_outcome: None,
        aux_task: None,
        provider_estimate_usd: None,
        session_started_at: 0.0,
    }
}

/// An aggregate that adds up one fact a row, read from the row's
/// arguments by its function: [`llm_fact`] or [`tool_fact`].
struct FactTotals(fn(&Context<'_>) -> rusqlite::Result<FactRow>);

impl Aggregate<Totals, Option<Vec<u8>>> for FactTotals {
    fn init(&self, _: &mut Context<'_>) -> rusqlite::Result<Totals> {
        Ok(Totals::default())
    }

    fn step(&self, ctx: &mut Context<'_>, acc: &mut Totals) -> rusqlite::Result<()> {
        acc.add(&Totals::of_fact(&(self.0)(ctx)?));
        Ok(())
    }

    fn finalize(&self, _: &mut Context<'_>, acc: Option<Totals>) -> rusqlite::Result<Option<Vec<u8>>> {
        Ok(acc.map(|t| blob_of_totals(&t)))
    }
}

/// The LLM call of a row of [`LLM_TOTALS`]'s arguments.
fn llm_fact(ctx: &Context<'_>) -> rusqlite::Result<FactRow> {
    let mut f = blank_fact(FactKind::LlmCall);
    f.cost_usd = ctx.get(0)?;
    f.input_tokens = ctx.get(1)?;
    f.output_tokens = ctx.get(2)?;
    f.cache_read_tokens = ctx.get(3)?;
    f.cache_write_tokens = ctx.get(4)?;
    f.reasoning_tokens = ctx.get(5)?;
    f.estimated = ctx.get(6)?;
    f.unpriced = ctx.get(7)?;
    // Only whether it is auxiliary counts; an empty name allocates nothing.
    f.aux_task = ctx.get::<bool>(8)?.then(String::new);
    Ok(f)
}

/// The tool call of a row of [`TOOL_TOTALS`]'s arguments, with how it
/// ended as spans and metrics tell it.
fn tool_fact(ctx: &Context<'_>) -> rusqlite::Result<FactRow> {
    let mut f = blank_fact(FactKind::ToolCall);
    let status = ctx.get_raw(0).as_str_or_null()?;
    f.tool_outcome = Some(ToolOutcome::of(true, status, ctx.get(1)?, ctx.get(2)?));
    Ok(f)
}

/// Which of [`words`]' numbers are floats (their bits): the cost and the
/// auxiliary cost.
const FLOAT_WORDS: [usize; 2] = [0, 14];

/// `t`'s fields in declaration order as 16 numbers, a float as its bits.
fn words(t: &Totals) -> [u64; 16] {
    [
        t.cost_usd.to_bits(),
        t.input_tokens as u64,
        t.output_tokens as u64,
        t.cache_read_tokens as u64,
        t.cache_write_tokens as u64,
        t.reasoning_tokens as u64,
        t.llm_calls as u64,
        t.estimated_llm_calls as u64,
        t.unpriced_llm_calls as u64,
        t.api_errors as u64,
        t.tool_calls as u64,
        t.tool_failures as u64,
        t.tool_nonzero_exits as u64,
        t.aux_llm_calls as u64,
        t.aux_cost_usd.to_bits(),
        t.sessions as u64,
    ]
}

/// The [`Totals`] of [`words`].
fn totals_of_words(w: [u64; 16]) -> Totals {
    Totals {
        cost_usd: f64::from_bits(w[0]),
        input_tokens: w[1] as i64,
        output_tokens: w[2] as i64,
        cache_read_tokens: w[3] as i64,
        cache_write_tokens: w[4] as i64,
        reasoning_tokens: w[5] as i64,
        llm_calls: w[6] as i64,
        estimated_llm_calls: w[7] as i64,
        unpriced_llm_calls: w[8] as i64,
        api_errors: w[9] as i64,
        tool_calls: w[10] as i64,
        tool_failures: w[11] as i64,
        tool_nonzero_exits: w[12] as i64,
        aux_llm_calls: w[13] as i64,
        aux_cost_usd: f64::from_bits(w[14]),
        sessions: w[15] as i64,
    }
}

/// `t` as a blob, small because SQLite's sorter holds one or two a
/// session (what fits its cache is never written to a temporary file):
/// the cost's 8 bytes (little endian) first, for [`cost_of_blob`]; a
/// 16-bit map (little endian) of which other numbers are not zero; then
/// those, a float as its 8 bytes, an integer as a zigzag varint (most are
/// a few calls or a few thousand tokens: one to three bytes).
fn blob_of_totals(t: &Totals) -> Vec<u8> {
    let w = words(t);
    let mut out = Vec::with_capacity(32);
    out.extend_from_slice(&w[0].to_le_bytes());
    let present = (1..16).filter(|&i| w[i] != 0).fold(0u16, |m, i| m | 1 << i);
    out.extend_from_slice(&present.to_le_bytes());
    for i in (1..16).filter(|&i| present & 1 << i != 0) {
        if FLOAT_WORDS.contains(&i) {
            out.extend_from_slice(&w[i].to_le_bytes());
        } else {
            let v = w[i] as i64;
            let mut z = ((v << 1) ^ (v >> 63)) as u64;
            while z >= 0x80 {
                out.push(z as u8 | 0x80);
                z >>= 7;
            }
            out.push(z as u8);
        }
    }
    out
}

/// The [`Totals`] of a blob [`blob_of_totals`] wrote (zeros for one it did not).
fn totals_of_blob(b: &[u8]) -> Totals {
    decode_words(b).map(totals_of_words).unwrap_or_default()
}

fn decode_words(b: &[u8]) -> Option<[u64; 16]> {
    let mut w = [0u64; 16];
    w[0] = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let present = u16::from_le_bytes(b.get(8..10)?.try_into().ok()?);
    let mut at = 10;
    for i in (1..16).filter(|&i| present & 1 << i != 0) {
        if FLOAT_WORDS.contains(&i) {
            w[i] = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
            at += 8;
        } else {
            let (mut z, mut shift) = (0u64, 0);
            loop {
                let byte = *b.get(at)?;
                at += 1;
                z |= u64::from(byte & 0x7f).checked_shl(shift)?;
                if byte < 0x80 {
                    break;
                }
                shift += 7;
            }
            w[i] = ((z >> 1) as i64 ^ -((z & 1) as i64)) as u64;
        }
    }
    (at == b.len()).then_some(w)
}

/// A blob's cost without decoding the rest.
fn cost_of_blob(b: &[u8]) -> f64 {
    b.get(..8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
        .map_or(0.0, |w| f64::from_bits(u64::from_le_bytes(w)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Writer;

    #[test]
    fn totals_round_trip_through_their_blob() {
        // Every field a different value, so a field the blob drops or
        // swaps comes back wrong (and a new field breaks this literal);
        // large, negative and zero ones too.
        let t = Totals {
            cost_usd: 0.1 + 0.2,
            input_tokens: 2,
            output_tokens: 300,
            cache_read_tokens: 4_000_000_000_000,
            cache_write_tokens: -5,
            reasoning_tokens: i64::MAX,
            llm_calls: i64::MIN,
            estimated_llm_calls: 0,
            unpriced_llm_calls: 9,
            api_errors: 10,
            tool_calls: 11,
            tool_failures: 12,
            tool_nonzero_exits: 13,
            aux_llm_calls: 14,
            aux_cost_usd: 1e-7 / 3.0,
            sessions: 16,
        };
        let blob = blob_of_totals(&t);
        assert_eq!(totals_of_blob(&blob), t);
        assert_eq!(cost_of_blob(&blob).to_bits(), t.cost_usd.to_bits());
        let small = Totals {
            cost_usd: 0.0125,
            llm_calls: 3,
            input_tokens: 1200,
            ..Totals::default()
        };
        let blob = blob_of_totals(&small);
        assert_eq!(blob.len(), 8 + 2 + 2 + 1, "a typical session's calls in a few bytes");
        assert_eq!(totals_of_blob(&blob), small);
        assert_eq!(totals_of_blob(&blob_of_totals(&Totals::default())), Totals::default());
        for bad in [
            &[1u8, 2, 3][..],
            &blob[..blob.len() - 1],
            &[blob.as_slice(), &[0]].concat(),
        ] {
            assert_eq!(totals_of_blob(bad), Totals::default(), "not a blob of ours: {bad:?}");
        }
    }

    /// The statement reads the window's runs by start and each table
    /// through its session index (its only scan is of its own inner
    /// select), and that select is not flattened into the sort, which
    /// would compute every sum twice: each sum appears once in the plan.
    #[test]
    fn sessions_by_cost_reads_indexes_and_sums_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("plan.db")).expect("open");
        let plan = store.query_plan(SESSIONS_BY_COST, "1");
        let scans: Vec<&String> = plan
            .iter()
            .filter(|s| s.starts_with("SCAN") && !s.starts_with("SCAN (subquery"))
            .collect();
        assert!(scans.is_empty(), "{plan:?}");
        assert!(plan.iter().any(|s| s.starts_with("CO-ROUTINE")), "{plan:?}");
        let sums = plan
            .iter()
            .filter(|s| s.starts_with("CORRELATED SCALAR SUBQUERY"))
            .count();
        assert_eq!(sums, 3, "{plan:?}");
        for step in [
            "SEARCH r USING INDEX runs_started",
            "SEARCH l USING COVERING INDEX llm_calls_session (session_id=?)",
            "SEARCH t USING PRIMARY KEY (session_id=?)",
            "SEARCH e USING COVERING INDEX llm_call_errors_session (session_id=?)",
        ] {
            assert!(plan.iter().any(|s| s.starts_with(step)), "{step}: {plan:?}");
        }
    }
}
