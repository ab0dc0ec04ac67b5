//! Processes on this machine: who holds a lease, and whether it is gone.
//!
//! Owns: the holder string of the export leases and the liveness check
//! that lets a process take over a lease whose holder died (`kill -9`, or
//! `os._exit` after a one-shot run) instead of waiting for it to lapse.
//! Must not touch: the store (callers pass what it holds).

/// This process's id in a lease: its pid, its pid namespace (a pid means
/// something only inside one) and a random tag (pids are reused).
pub fn lease_holder() -> String {
    format!(
        "pid {} ns {} #{:08x}",
        std::process::id(),
        pid_namespace().unwrap_or_default(),
        fastrand::u32(..)
    )
}

/// Whether the process that holds a lease as `holder` with `pid` has
/// surely ended: it was in this pid namespace and no process has its pid.
/// Anything else (another machine or container, an old holder format, a
/// pid reused by a live process) is "not known to be gone", and the lease
/// is left to lapse by itself.
pub(crate) fn holder_is_gone(holder: &str, pid: Option<i64>) -> bool {
    let (Some(pid), Some(ours)) = (pid, pid_namespace()) else {
        return false;
    };
    let Some(theirs) = holder.split(" ns ").nth(1).and_then(|rest| rest.split(' ').next()) else {
        return false;
    };
    if theirs != ours || pid <= 0 || pid > i64::from(i32::MAX) {
        return false;
    }
    !is_alive(pid as i32)
}

#[cfg(unix)]
fn is_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn is_alive(_pid: i32) -> bool {
    true
}

/// The pid namespace of this process (`/proc/self/ns/pid`'s inode), where
/// the platform has one.
fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let text = link.to_string_lossy();
    let inode = text.trim_start_matches("pid:[").trim_end_matches(']');
    (!inode.is_empty()).then(|| inode.to_string())
}

/// This machine's name, for people reading the fleet's hosts table or an
/// alert.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(crate::config::fleet::hostname_var)
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_whose_process_ended_is_gone_and_a_live_one_is_not() {
        let me = lease_holder();
        assert!(!holder_is_gone(&me, Some(i64::from(std::process::id()))));
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = i64::from(child.id());
        child.wait().expect("reap");
        let theirs = format!("pid {pid} ns {} #00000000", pid_namespace().expect("linux"));
        assert!(holder_is_gone(&theirs, Some(pid)));
        // Another namespace, or an old holder string: not known to be gone.
        assert!(!holder_is_gone(&format!("pid {pid} ns 1 #00000000"), Some(pid)));
        assert!(!holder_is_gone(&format!("pid {pid} #00000000"), Some(pid)));
    }
}
