//! The integration tests that need a real service the machine must have:
//! PostgreSQL (the fleet budgets), Prometheus (a real scrape and alert
//! rule) and headless Chromium (the viewer in a browser). Built only with
//! `--features services`, so a plain `cargo test` needs nothing but Rust;
//! `scripts/test.sh` runs this binary and checks that every test in it ran.
//! A missing service fails its tests, naming how to install it.

mod fleet;
mod prometheus;
mod ui_browser;
