//! Unit tests of the outbox, its sweeps and the lease (temp-dir stores and query plans).

use super::*;

/// The idle sweep, every minute in every Hermes process, reads what is
/// open, not every row ever recorded: no statement of it
/// scans a ledger table.
#[test]
fn the_idle_sweep_reads_only_what_is_open() {
    let (_dir, store) = store();
    let mut statements: Vec<String> = closing_statements(LISTED_SESSIONS)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    statements.push(super::super::ledger::IDLE_SESSION_BATCH.to_string());
    statements.push(super::super::ledger::CLOSE_LISTED_TURNS.to_string());
    statements.push(super::super::ledger::CLOSE_LISTED_RUNS.to_string());
    for sql in statements {
        let steps = store.query_plan(&sql, "1");
        let scans: Vec<&String> = steps
            .iter()
            // Scanning a subquery reads the rows its indexed arms produced.
            .filter(|s| {
                s.starts_with("SCAN")
                    && !s.contains("json_each")
                    && !s.contains("USING INDEX turns_open")
                    && !s.starts_with("SCAN (subquery-")
            })
            .collect();
        assert!(scans.is_empty(), "{sql}\n{steps:?}");
    }
}

fn store() -> (tempfile::TempDir, Outbox) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Outbox::open(&dir.path().join("s.db")).expect("open");
    (dir, store)
}

#[test]
fn a_lease_is_held_by_one_holder_until_it_expires() {
    let (_dir, mut store) = store();
    assert!(store.acquire_lease(TRACE_LEASE, "a", 1, 100.0, 10.0).expect("a"));
    assert!(!store.acquire_lease(TRACE_LEASE, "b", 2, 105.0, 10.0).expect("b"));
    assert!(store.acquire_lease(TRACE_LEASE, "a", 1, 105.0, 10.0).expect("a renews"));
    assert!(!store.acquire_lease(TRACE_LEASE, "b", 2, 114.0, 10.0).expect("b early"));
    assert!(store
        .acquire_lease(TRACE_LEASE, "b", 2, 115.5, 10.0)
        .expect("b after expiry"));
    assert_eq!(store.lease(TRACE_LEASE).expect("lease").expect("held").holder, "b");
    store.release_lease(TRACE_LEASE, "a").expect("not a's");
    assert!(store.lease(TRACE_LEASE).expect("lease").is_some());
    store.release_lease(TRACE_LEASE, "b").expect("release");
    assert!(store.acquire_lease(TRACE_LEASE, "a", 1, 116.0, 10.0).expect("a again"));
}

#[test]
fn the_retention_cap_drops_the_oldest_rows_and_counts_them() {
    let (_dir, mut store) = store();
    let tx = store.db.conn.transaction().expect("tx");
    for i in 0..10 {
        enqueue(&tx, SpanKind::Tool, "s", &format!("t{i}"), -1, i as f64, false).expect("enqueue");
    }
    tx.commit().expect("commit");
    assert_eq!(
        store.outbox_enforce_cap(7, 2).expect("cap"),
        2,
        "at most the limit at once"
    );
    assert_eq!(store.outbox_enforce_cap(7, 100).expect("cap"), 1);
    let ready = store.outbox_ready(100.0, 0.0, 100).expect("ready");
    assert_eq!(ready.first().map(|r| r.key.as_str()), Some("t3"));
    let state = store.export_state().expect("state");
    assert_eq!((state.pending, state.dropped), (7, 3));
}

#[test]
fn a_row_that_moved_while_being_sent_is_kept() {
    let (_dir, mut store) = store();
    let tx = store.db.conn.transaction().expect("tx");
    enqueue(&tx, SpanKind::Run, "s", "s", -1, 1.0, true).expect("enqueue");
    tx.commit().expect("commit");
    assert!(store.outbox_ready(50.0, 60.0, 10).expect("held").is_empty());
    let rows = store.outbox_ready(100.0, 60.0, 10).expect("ready");
    assert_eq!(rows.len(), 1);
    let tx = store.db.conn.transaction().expect("tx");
    enqueue(&tx, SpanKind::Run, "s", "s", -1, 2.0, false).expect("re-enqueue");
    tx.commit().expect("commit");
    store
        .outbox_done(&rows, &[], &[(counter::EXPORTED, 1)], 100.0)
        .expect("done");
    assert_eq!(store.export_state().expect("state").pending, 1);
    let rows = store.outbox_ready(100.0, 60.0, 10).expect("ready");
    store
        .outbox_done(&rows, &[], &[(counter::EXPORTED, 1)], 100.0)
        .expect("done");
    let state = store.export_state().expect("state");
    assert_eq!((state.pending, state.exported), (0, 2));
}

#[test]
fn an_attempt_left_without_an_outcome_past_its_timeout_is_a_failure() {
    let (_dir, mut store) = store();
    let now = crate::unix_now();
    // A process ended in the middle of a send that was still in time.
    store
        .export_attempt("traces: no answer", now, now + 3600.0)
        .expect("attempt");
    let state = store.export_state().expect("state");
    assert_eq!((state.last_error, state.failed), (None, 0), "still in time");
    // One whose timeout passed with nothing written after it.
    store
        .export_attempt("traces: no answer", now - 20.0, now - 10.0)
        .expect("attempt");
    let state = store.export_state().expect("state");
    assert_eq!(state.last_error.as_deref(), Some("traces: no answer"));
    assert_eq!((state.last_error_at, state.failed), (Some(now - 10.0), 1));
    // An outcome written after the attempt is what is shown instead.
    store.export_failed("traces: status 503", now - 5.0).expect("failed");
    let state = store.export_state().expect("state");
    assert_eq!(state.last_error.as_deref(), Some("traces: status 503"));
    assert_eq!(state.failed, 1, "the attempt's own outcome is not counted twice");
}
