//! A SQLite VFS that writes a transaction's WAL frames with one system call.
//!
//! SQLite writes each WAL frame as two `pwrite`s (its 24-byte header, then
//! the page), so a commit of n pages costs 2n system calls; on this kind of
//! VM each costs 1-2 µs, more than SQLite's own work for a small event. The
//! VFS here is the platform's default one except for WAL files: their
//! writes are gathered in memory while they follow one another and go out
//! as one write when the commit frame (the one whose header carries the
//! database size) is complete.
//!
//! Why this keeps SQLite's guarantees:
//! - Nobody can see a frame before its commit: other connections find
//!   frames through the wal-index header, which SQLite updates only after
//!   the commit frame's write has returned, and by then everything gathered
//!   is written. An error of that write is the commit frame's error, so the
//!   commit fails as it would have.
//! - The connection itself reads a frame back only through this file, and
//!   every operation other than a write first writes out what is gathered
//!   (a page cache spill mid-transaction, a checkpoint, a sync).
//! - A crash before the commit frame is written loses only an uncommitted
//!   transaction, as it would have.
//!
//! Syncs, locks and the shared-memory index are the default VFS's, so other
//! processes and tools (the `sqlite3` shell) share the file as before.

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The name connections open the store with.
pub const NAME: &CStr = c"hermes-otel";

/// Gathered bytes written out at most (a large transaction spilling pages).
const MAX_GATHERED: usize = 8 << 20;

/// The most one write of the default VFS takes (it masks sizes to 17 bits).
const WRITE_PIECE: usize = 64 << 10;

/// SQLite's WAL frame header size; a write of this size is a frame header.
const FRAME_HEADER: usize = 24;

/// Registers the VFS once; `Err` when SQLite has no default VFS to wrap.
pub fn register() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            // SAFETY: sqlite3_vfs_find with NULL returns the default VFS,
            // which lives for the life of the process.
            let base = unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) };
            if base.is_null() {
                return Err("SQLite has no default VFS".into());
            }
            // SAFETY: `base` is a valid VFS (checked above).
            let b = unsafe { &*base };
            let vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
                iVersion: b.iVersion,
                szOsFile: (std::mem::size_of::<WalFile>() as c_int) + b.szOsFile,
                mxPathname: b.mxPathname,
                pNext: std::ptr::null_mut(),
                zName: NAME.as_ptr(),
                pAppData: base.cast(),
                xOpen: Some(open),
                ..*b
            }));
            // SAFETY: `vfs` is leaked, so it outlives every connection.
            let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
            if rc == ffi::SQLITE_OK {
                Ok(())
            } else {
                Err(format!("registering the VFS failed ({rc})"))
            }
        })
        .clone()
}

/// A WAL file: the default VFS's file right after this header.
#[repr(C)]
struct WalFile {
    /// Must come first: SQLite sees this struct as a `sqlite3_file`.
    base: ffi::sqlite3_file,
    /// Offset in the file of `gathered[0]`.
    gathered_at: i64,
    gathered: Vec<u8>,
    /// The last write was the header of a commit frame.
    commit_page_next: bool,
}

impl WalFile {
    /// The default VFS's file that follows the header.
    ///
    /// SAFETY: `file` must be a `WalFile` opened by [`open`].
    unsafe fn real(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
        unsafe { file.cast::<u8>().add(std::mem::size_of::<WalFile>()).cast() }
    }

    /// SAFETY: `file` must be a `WalFile` opened by [`open`].
    unsafe fn of<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
        unsafe { &mut *file.cast::<WalFile>() }
    }

    /// Writes out what is gathered.
    ///
    /// SAFETY: `file` must be a `WalFile` opened by [`open`].
    unsafe fn write_out(file: *mut ffi::sqlite3_file) -> c_int {
        let wal = unsafe { Self::of(file) };
        if wal.gathered.is_empty() {
            return ffi::SQLITE_OK;
        }
        let real = unsafe { Self::real(file) };
        let write = unsafe { (*(*real).pMethods).xWrite.expect("xWrite") };
        let mut rc = ffi::SQLITE_OK;
        let mut offset = wal.gathered_at;
        // The default VFS writes less than 128 KiB per call.
        for piece in wal.gathered.chunks(WRITE_PIECE) {
            rc = unsafe { write(real, piece.as_ptr().cast(), piece.len() as c_int, offset) };
            if rc != ffi::SQLITE_OK {
                break;
            }
            offset += piece.len() as i64;
        }
        wal.gathered.clear();
        rc
    }
}

/// The default VFS this one wraps.
fn base_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: pAppData was set to the default VFS at registration.
    unsafe { (*vfs).pAppData.cast() }
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let base = base_vfs(vfs);
    let base_open = unsafe { (*base).xOpen.expect("xOpen") };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Everything but WAL files is the default VFS's own, in place.
        return unsafe { base_open(base, name, file, flags, out_flags) };
    }
    let real = unsafe { WalFile::real(file) };
    let rc = unsafe { base_open(base, name, real, flags, out_flags) };
    if rc != ffi::SQLITE_OK || unsafe { (*real).pMethods.is_null() } {
        // SQLite calls no method of a file whose pMethods is NULL.
        unsafe { (*file).pMethods = std::ptr::null() };
        return rc;
    }
    unsafe {
        file.cast::<WalFile>().write(WalFile {
            base: ffi::sqlite3_file {
                pMethods: wal_methods(),
            },
            gathered_at: 0,
            gathered: Vec::new(),
            commit_page_next: false,
        })
    };
    rc
}

/// The WAL file's methods: each forwards to the method of the file's own
/// default-VFS methods, with writes gathered and everything else writing
/// out first. One table serves every WAL file. Version 1: shared memory and
/// memory-mapped reads are methods SQLite calls on the database file only.
fn wal_methods() -> *const ffi::sqlite3_io_methods {
    static METHODS: OnceLock<usize> = OnceLock::new();
    *METHODS.get_or_init(|| {
        let methods = Box::leak(Box::new(ffi::sqlite3_io_methods {
            iVersion: 1,
            xClose: Some(close),
            xRead: Some(read),
            xWrite: Some(write),
            xTruncate: Some(truncate),
            xSync: Some(sync),
            xFileSize: Some(file_size),
            xLock: Some(lock),
            xUnlock: Some(unlock),
            xCheckReservedLock: Some(check_reserved_lock),
            xFileControl: Some(file_control),
            xSectorSize: Some(sector_size),
            xDeviceCharacteristics: Some(device_characteristics),
            xShmMap: None,
            xShmLock: None,
            xShmBarrier: None,
            xShmUnmap: None,
            xFetch: None,
            xUnfetch: None,
        }));
        methods as *const _ as usize
    }) as *const ffi::sqlite3_io_methods
}

/// The default method `$m` of the real file behind `$file`.
macro_rules! real_method {
    ($file:expr, $m:ident) => {{
        let real = unsafe { WalFile::real($file) };
        (real, unsafe { (*(*real).pMethods).$m.expect(stringify!($m)) })
    }};
}

/// Defines `$name`: writes out what is gathered, then calls the default
/// method `$method` with the same arguments.
macro_rules! after_writing_out {
    ($name:ident => $method:ident ( $($arg:ident : $ty:ty),* )) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            let rc = unsafe { WalFile::write_out(file) };
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            let (real, method) = real_method!(file, $method);
            unsafe { method(real $(, $arg)*) }
        }
    };
}

after_writing_out!(read => xRead(buf: *mut c_void, amount: c_int, offset: i64));
after_writing_out!(truncate => xTruncate(size: i64));
after_writing_out!(sync => xSync(flags: c_int));
after_writing_out!(file_size => xFileSize(size: *mut i64));
after_writing_out!(lock => xLock(level: c_int));
after_writing_out!(unlock => xUnlock(level: c_int));
after_writing_out!(check_reserved_lock => xCheckReservedLock(out: *mut c_int));
after_writing_out!(file_control => xFileControl(op: c_int, arg: *mut c_void));

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let (real, method) = real_method!(file, xSectorSize);
    unsafe { method(real) }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let (real, method) = real_method!(file, xDeviceCharacteristics);
    unsafe { method(real) }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    let written = unsafe { WalFile::write_out(file) };
    let (real, method) = real_method!(file, xClose);
    let closed = unsafe { method(real) };
    unsafe { std::ptr::drop_in_place(file.cast::<WalFile>()) };
    if written != ffi::SQLITE_OK {
        written
    } else {
        closed
    }
}

unsafe extern "C" fn write(file: *mut ffi::sqlite3_file, data: *const c_void, amount: c_int, offset: i64) -> c_int {
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), amount.max(0) as usize) };
    let wal = unsafe { WalFile::of(file) };
    let end = wal.gathered_at + wal.gathered.len() as i64;
    if !wal.gathered.is_empty() && offset >= wal.gathered_at && offset + amount as i64 <= end {
        // Rewriting what is gathered (a frame written again in the same
        // transaction): the later bytes win, as in the file.
        let at = (offset - wal.gathered_at) as usize;
        wal.gathered[at..at + bytes.len()].copy_from_slice(bytes);
    } else {
        if !wal.gathered.is_empty() && offset != end {
            let rc = unsafe { WalFile::write_out(file) };
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        let wal = unsafe { WalFile::of(file) };
        if wal.gathered.is_empty() {
            wal.gathered_at = offset;
        }
        wal.gathered.extend_from_slice(bytes);
    }
    let wal = unsafe { WalFile::of(file) };
    let commit_page = wal.commit_page_next;
    // A frame header's bytes 4..8 are the database size after a commit
    // frame and zero in every other frame.
    wal.commit_page_next = bytes.len() == FRAME_HEADER && bytes[4..8] != [0, 0, 0, 0];
    if commit_page || wal.gathered.len() >= MAX_GATHERED {
        return unsafe { WalFile::write_out(file) };
    }
    ffi::SQLITE_OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Connection, OpenFlags};

    fn open(path: &std::path::Path, ours: bool) -> Connection {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let conn = if ours {
            register().expect("register");
            Connection::open_with_flags_and_vfs(path, flags, NAME).expect("open ours")
        } else {
            Connection::open_with_flags(path, flags).expect("open plain")
        };
        conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
        conn.pragma_update(None, "synchronous", "NORMAL").expect("sync");
        conn
    }

    /// Our connection to a new database with table `t` and a page cache of
    /// `cache_pages` (small, so a large transaction spills).
    fn with_table(path: &std::path::Path, cache_pages: i64) -> Connection {
        let ours = open(path, true);
        ours.pragma_update(None, "cache_size", cache_pages).expect("cache");
        ours.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
            .expect("table");
        ours
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .expect("count")
    }

    fn integrity(conn: &Connection) -> String {
        conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .expect("check")
    }

    #[test]
    fn another_connection_sees_each_commit_whole_and_nothing_before() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("v.db");
        let ours = open(&path, true);
        ours.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
            .expect("table");
        let plain = open(&path, false);
        for n in 1..=200i64 {
            ours.execute_batch("BEGIN").expect("begin");
            for i in 0..n % 7 + 1 {
                ours.execute(
                    "INSERT INTO t (v) VALUES (?1)",
                    [format!("{n}:{i}:{}", "x".repeat(300))],
                )
                .expect("insert");
            }
            let before = count(&plain);
            ours.execute_batch("COMMIT").expect("commit");
            assert_eq!(count(&plain), before + n % 7 + 1, "commit {n}");
        }
        assert_eq!(integrity(&plain), "ok");
    }

    #[test]
    fn a_transaction_larger_than_the_page_cache_and_the_gathering_reads_back() {
        // 12 MB in one transaction with a 40-page cache: pages spill to the
        // WAL mid-transaction and are read back, a savepoint is undone, and
        // more than MAX_GATHERED is gathered before the commit.
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("v.db");
        let ours = with_table(&path, 40);
        ours.execute_batch("BEGIN").expect("begin");
        let row = vec![7u8; 1500];
        for k in 0..8000i64 {
            ours.execute("INSERT INTO t (k, v) VALUES (?1, ?2)", rusqlite::params![k, row])
                .expect("insert");
            if k == 4000 {
                ours.execute_batch("SAVEPOINT s").expect("savepoint");
            }
            if k == 4999 {
                ours.execute_batch("ROLLBACK TO s; RELEASE s").expect("undo");
            }
        }
        let sum: i64 = ours
            .query_row("SELECT SUM(length(v)) FROM t", [], |r| r.get(0))
            .expect("sum");
        assert_eq!(sum, 1500 * (8000 - 999));
        ours.execute_batch("COMMIT").expect("commit");
        let plain = open(&path, false);
        assert_eq!(count(&plain), 8000 - 999);
        assert_eq!(integrity(&plain), "ok");
        // A checkpoint reads every frame back through the WAL file.
        ours.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .expect("checkpoint");
        assert_eq!(count(&open(&path, false)), 8000 - 999);
    }

    #[test]
    fn a_rolled_back_transaction_leaves_nothing_behind() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("v.db");
        let ours = with_table(&path, 20);
        ours.execute_batch("BEGIN").expect("begin");
        for k in 0..2000i64 {
            ours.execute("INSERT INTO t (k, v) VALUES (?1, zeroblob(1000))", [k])
                .expect("insert");
        }
        ours.execute_batch("ROLLBACK").expect("rollback");
        ours.execute("INSERT INTO t (k, v) VALUES (1, x'01')", [])
            .expect("after");
        drop(ours);
        let plain = open(&path, false);
        assert_eq!(count(&plain), 1);
        assert_eq!(integrity(&plain), "ok");
    }
}
