//! The store crate's integration tests, one module per file of `tests/`,
//! in one test binary that links nothing but the store and the model.

mod bad_input;
mod crash_consistency;
mod decode_props;
mod row_counts;
mod stream;

/// The name `--exact` runs a test by in this binary: `test` in the module
/// whose `module_path!()` is `module` (a test binary's modules are part of
/// its test names; its crate's name is not).
fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{test}"),
        None => test.to_string(),
    }
}
