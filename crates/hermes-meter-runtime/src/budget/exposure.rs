//! Who can change the limits: a budget file or store directory writable by
//! every user of the machine lets anyone (an agent of any user included)
//! lift the brake, and the user Hermes runs as can lift its own unless the
//! file is kept where it cannot write (docs/budgets-and-fleet.md, "A brake
//! the agent cannot lift"). Read by `status` and logged once by the gate.
//!
//! Owns: reading the modes and owners of the budget file and its
//! directory. Must not touch: the file's contents, the store.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use hermes_meter_model::budget::BUDGETS_FILE_NAME;

/// What about the budget file of `store_dir` lets more users change the
/// limits than the operator meant: a file, or a directory without the
/// sticky bit, writable by every user. Empty when there is none (or no
/// file).
pub fn world_writable(store_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let file = store_dir.join(BUDGETS_FILE_NAME);
    let Ok(meta) = std::fs::metadata(&file) else {
        return out;
    };
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 {
        out.push(format!(
            "{} is writable by every user of this machine (mode {:o}): anyone, an agent of any user \
             included, can lift the limits; `chmod o-w` it",
            file.display(),
            mode & 0o7777
        ));
    }
    if let Ok(dir) = std::fs::metadata(store_dir) {
        let mode = dir.permissions().mode();
        if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            out.push(format!(
                "{} is writable by every user of this machine (mode {:o}, no sticky bit): anyone can replace \
                 {BUDGETS_FILE_NAME} and lift the limits; `chmod o-w` it",
                store_dir.display(),
                mode & 0o7777
            ));
        }
    }
    out
}

/// Whether this process's user can change the budget file of `store_dir`
/// (write it, or replace it in its directory): then an agent running as
/// this user can too, refused only by the plugin's gate. `None` without a
/// file.
pub fn editable_here(store_dir: &Path) -> Option<bool> {
    let file = store_dir.join(BUDGETS_FILE_NAME);
    let meta = std::fs::metadata(&file).ok()?;
    let dir = std::fs::metadata(store_dir).ok()?;
    Some(can_write(&file) || (can_write(store_dir) && may_replace(&meta, &dir)))
}

/// Whether the real user of this process may write `path` (`access(2)`).
fn can_write(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call;
    // access(2) reads it and keeps nothing.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::access(c.as_ptr(), libc::W_OK) };
    rc == 0
}

/// Whether a user who can write the directory may replace the file in it:
/// not in a sticky directory unless they own the file or the directory.
fn may_replace(file: &std::fs::Metadata, dir: &std::fs::Metadata) -> bool {
    if dir.permissions().mode() & 0o1000 == 0 {
        return true;
    }
    // SAFETY: getuid(2) cannot fail and takes no arguments.
    #[allow(unsafe_code)]
    let uid = unsafe { libc::getuid() };
    uid == 0 || file.uid() == uid || dir.uid() == uid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn a_world_writable_file_or_directory_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(world_writable(dir.path()).is_empty(), "no file, nothing to say");
        assert_eq!(editable_here(dir.path()), None);
        let file = dir.path().join(BUDGETS_FILE_NAME);
        std::fs::write(&file, "[global]\ndaily = 1\n").expect("write");
        chmod(&file, 0o644);
        chmod(dir.path(), 0o755);
        assert!(world_writable(dir.path()).is_empty());
        assert_eq!(editable_here(dir.path()), Some(true), "the owner can");
        chmod(&file, 0o666);
        let said = world_writable(dir.path());
        assert!(
            said.len() == 1 && said[0].contains("mode 666") && said[0].contains("chmod o-w"),
            "{said:?}"
        );
        chmod(&file, 0o644);
        chmod(dir.path(), 0o777);
        let said = world_writable(dir.path());
        assert!(said.len() == 1 && said[0].contains("no sticky bit"), "{said:?}");
        // A sticky directory (like /tmp) keeps others from replacing it.
        chmod(dir.path(), 0o1777);
        assert!(world_writable(dir.path()).is_empty());
        chmod(dir.path(), 0o755);
    }
}
