//! The `hermes-meter` binary run on a store directory, for tests that
//! check what a user sees: exit code, stdout, stderr.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_hermes-meter");

/// `hermes-meter --home <home> args`, with no `HERMES_METER_HOME` from the
/// environment.
pub(crate) fn cli(home: &Path, args: &[&str]) -> (i32, String, String) {
    cli_as(home, None, args)
}

/// Like [`cli`], run as the user and group `uid` (through `setpriv`) when
/// given.
pub(crate) fn cli_as(home: &Path, uid: Option<u32>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = match uid {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "--",
                BIN,
            ]);
            c
        }
        None => Command::new(BIN),
    };
    let out = cmd
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("HERMES_METER_HOME")
        .output()
        .expect("run hermes-meter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
