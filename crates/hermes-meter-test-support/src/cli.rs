//! The `hermes-meter` binary run on a store directory, for tests that
//! check what a user sees: exit code, stdout, stderr.

use std::path::Path;
use std::process::Command;

/// The `hermes-meter` binary Cargo built beside the test or bench running
/// (`target/<profile>/hermes-meter`, one directory above the test binaries
/// in `deps/`): Cargo builds a package's binaries before its integration
/// tests and benches, and names them by `CARGO_BIN_EXE_<name>` only to
/// those, not to a crate they depend on.
pub fn binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let profile = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/");
    let bin = profile.join("hermes-meter");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build`",
        bin.display()
    );
    bin
}

/// `hermes-meter --home <home> args`, with no `HERMES_METER_HOME` from the
/// environment.
pub fn cli(home: &Path, args: &[&str]) -> (i32, String, String) {
    cli_as(home, None, args)
}

/// Like [`cli`], run as the user and group `uid` (through `setpriv`) when
/// given.
pub fn cli_as(home: &Path, uid: Option<u32>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = match uid {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "--",
            ]);
            c.arg(binary());
            c
        }
        None => Command::new(binary()),
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
