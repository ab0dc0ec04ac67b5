//! The files of the store directory other than through SQLite: created
//! private (a 0700 directory, 0600 files), never with the process umask,
//! and the budget and pricing files replaced atomically.
//!
//! Owns: modes and the atomic replace. Must not touch: what the files hold.

use std::path::Path;

use crate::error::{Error, Result};

/// Creates `dir` (and parents) with mode 0700 if it does not exist.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|e| Error::io(dir, e))
}

/// Writes `bytes` to a temporary file beside `path` and renames it over
/// (the budget file: a process reloading it sees the old text or the new).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.{:08x}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("budgets.toml"),
        std::process::id(),
        fastrand::u32(..)
    ));
    let mut f = private_file_options()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| Error::io(&tmp, e))?;
    std::io::Write::write_all(&mut f, bytes).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// Options that create a file with mode 0600, never with the process
/// umask (0644 for most): every file of the store directory holds usage,
/// spend or a lock on them (the database, spools, `health.json` and
/// `health.lock`, the budget file). Callers add how they open it.
pub fn private_file_options() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

/// Creates `path` with mode 0600 if it does not exist, so SQLite never
/// creates it with the process umask. SQLite gives the -wal and -shm files
/// the database file's mode.
pub(crate) fn create_private_file(path: &Path) -> Result<()> {
    private_file_options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map(|_| ())
        .map_err(|e| Error::io(path, e))
}
