//! 8 OS processes × 4 threads apply hook events to one store at once:
//! totals are exact, no hook fails, nothing deadlocks.
//!
//! Hook latency under this load is a benchmark figure (`cargo bench --bench
//! contention`), not asserted here.

use hermes_meter_test_support::load;

use hermes_meter_store::Writer;

#[test]
fn eight_processes_of_four_threads_record_every_event_exactly_once() {
    load::run_child_if_asked();
    let dir = tempfile::tempdir().expect("temp dir");
    drop(Writer::open_dir(dir.path()).expect("create the store"));
    let (processes, threads, sessions) = (8, 4, 3);
    let result = load::run(
        dir.path(),
        processes,
        threads,
        sessions,
        &[
            "--exact",
            &hermes_meter_test_support::test_name(
                module_path!(),
                "eight_processes_of_four_threads_record_every_event_exactly_once",
            ),
            "--nocapture",
        ],
    );
    assert_eq!(
        result.failures, 0,
        "no hook saw a failure (no SQLITE_BUSY, no dropped event)"
    );
    let runs = processes * threads * sessions;
    let fixture = std::fs::read_to_string(load::session_fixture()).expect("fixture");
    let per_session = |hook: &str| {
        fixture
            .lines()
            .filter(|l| l.contains(&format!("\"hook\": \"{hook}\"")))
            .count()
    };
    let store = Writer::open_dir(dir.path()).expect("open");
    let q = |sql: &str| store.query_scalar::<i64>(sql).expect(sql) as usize;
    assert_eq!(q("SELECT COUNT(*) FROM runs"), runs);
    assert_eq!(
        q("SELECT COUNT(*) FROM llm_calls"),
        runs * per_session("post_api_request")
    );
    assert_eq!(
        q("SELECT COUNT(*) FROM tool_calls"),
        runs * per_session("post_tool_call")
    );
    assert_eq!(
        q("SELECT SUM(llm_calls) FROM runs"),
        runs * per_session("post_api_request")
    );
    assert_eq!(q("SELECT COUNT(*) FROM runs WHERE status = 'ok'"), runs);
    // Every hook call reached the journal; the ignored hooks (transform_*) did not.
    let recorded = fixture
        .lines()
        .filter(|l| !l.contains("\"hook\": \"transform_"))
        .count();
    assert_eq!(q("SELECT COUNT(*) FROM journal"), runs * recorded);
    assert_eq!(result.latencies.len(), runs * recorded);
}
