//! A real PostgreSQL (Debian's) for the fleet tests: a fresh cluster in a
//! temporary directory, listening only on a Unix socket in that directory
//! (`listen_addresses = ''`): nothing leaves the machine, and no port is
//! shared with anything else.
//!
//! PostgreSQL refuses to run as root, and CI runs the tests as root: then
//! the cluster belongs to `nobody` and `initdb` and `postgres` run as that
//! user through `setpriv` (util-linux). As any other user they run as is.
//! Set `PG_BIN` to use another PostgreSQL's binaries.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's PostgreSQL 15 binaries.
const DEFAULT_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The uid and gid the cluster runs as when the tests run as root.
const NOBODY: u32 = 65534;

/// A running (or stopped) cluster; stopped and removed when dropped.
pub struct Postgres {
    dir: tempfile::TempDir,
    server: Option<Child>,
    /// With TLS: the loopback TCP port it also listens on.
    port: Option<u16>,
}

/// How [`Postgres::start_with`] sets the cluster up.
#[derive(Default)]
pub struct Options {
    /// The `postgres` user's password; every connection must give it
    /// (SCRAM). Without it, local connections are trusted.
    pub password: Option<String>,
    /// A server certificate and key (PEM): TLS on, and the server also
    /// listens on 127.0.0.1 on a free port.
    pub tls: Option<(String, String)>,
}

impl Postgres {
    /// Makes a cluster and starts it; waits until it accepts connections.
    pub fn start() -> Postgres {
        Self::start_with(Options::default())
    }

    /// [`Postgres::start`] with a password and TLS.
    #[allow(unsafe_code)] // reviewed libc calls, each with its SAFETY note
    pub fn start_with(options: Options) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("hermes-meter-pg")
            .tempdir()
            .expect("temp dir");
        if as_root() {
            // SAFETY: chown on a path we just created, with valid ids.
            let path = std::ffi::CString::new(dir.path().to_str().expect("utf-8 path")).expect("no NUL");
            let rc = unsafe { libc::chown(path.as_ptr(), NOBODY, NOBODY) };
            assert_eq!(rc, 0, "chown the cluster directory to nobody");
        }
        let data = dir.path().join("data");
        let mut initdb = command("initdb");
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-E", "UTF8", "--no-sync"]);
        match &options.password {
            Some(pw) => {
                let file = dir.path().join("pwfile");
                write_owned(&file, pw);
                initdb.args(["-A", "scram-sha-256", "--pwfile"]).arg(&file);
            }
            None => {
                initdb.args(["-A", "trust"]);
            }
        }
        let out = initdb
            .stdout(Stdio::null())
            .output()
            .expect("run initdb (apt-get install postgresql)");
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let mut port = None;
        if let Some((cert, key)) = &options.tls {
            write_owned(&data.join("server.crt"), cert);
            write_owned(&data.join("server.key"), key);
            let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            port = Some(free.local_addr().expect("addr").port());
            let conf = format!(
                "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nlisten_addresses = '127.0.0.1'\nport = {}\n",
                port.unwrap_or(5432)
            );
            let mut text = std::fs::read_to_string(data.join("postgresql.conf")).expect("conf");
            text.push_str(&conf);
            std::fs::write(data.join("postgresql.conf"), text).expect("write conf");
        }
        let mut pg = Postgres {
            dir,
            server: None,
            port,
        };
        pg.resume();
        pg
    }

    /// The libpq URL of the TCP listener (with TLS): `postgresql://postgres@127.0.0.1:PORT/postgres`.
    pub fn tcp_url(&self) -> String {
        format!(
            "postgresql://postgres@127.0.0.1:{}/postgres",
            self.port.expect("started with TLS")
        )
    }

    /// The fleet URL in libpq form, with the socket directory as host.
    pub fn url(&self) -> String {
        format!(
            "postgresql://postgres@/postgres?host={}&port=5432",
            self.dir.path().display()
        )
    }

    /// Stops the server (fast shutdown: sessions are cut) and waits for it.
    #[allow(unsafe_code)] // reviewed libc calls, each with its SAFETY note
    pub fn stop(&mut self) {
        if let Some(mut child) = self.server.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same data; waits until it accepts
    /// connections.
    pub fn resume(&mut self) {
        assert!(self.server.is_none(), "already running");
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log file");
        // Only a Unix socket unless TLS asked for the loopback listener.
        let listen = format!(
            "listen_addresses={}",
            if self.port.is_some() { "127.0.0.1" } else { "" }
        );
        let child = command("postgres")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-c", &listen, "-k"])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        self.server = Some(child);
        self.wait_ready();
    }

    /// Runs one SQL statement through psql and returns its output.
    pub fn psql(&self, sql: &str) -> String {
        let out = command("psql")
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-U", "postgres", "-h"])
            .arg(self.dir.path())
            .args(["-p", &self.port.unwrap_or(5432).to_string()])
            .args(["-d", "postgres", "-c", sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = command("pg_isready")
                .arg("-h")
                .arg(self.dir.path())
                .args(["-p", &self.port.unwrap_or(5432).to_string()])
                .args(["-U", "postgres", "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            if let Some(status) = self.server.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
                panic!("postgres exited ({status}): {log}");
            }
            assert!(Instant::now() < deadline, "postgres did not start within a minute");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes `text` to `path`, mode 0600, owned by the cluster's user.
#[allow(unsafe_code)] // reviewed libc calls, each with its SAFETY note
fn write_owned(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    if as_root() {
        let c = std::ffi::CString::new(path.to_str().expect("utf-8 path")).expect("no NUL");
        // SAFETY: chown on a path we just wrote, with valid ids.
        assert_eq!(
            unsafe { libc::chown(c.as_ptr(), NOBODY, NOBODY) },
            0,
            "chown {}",
            path.display()
        );
    }
}

#[allow(unsafe_code)] // reviewed libc calls, each with its SAFETY note
fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn bin() -> PathBuf {
    std::env::var_os("PG_BIN").map_or_else(|| PathBuf::from(DEFAULT_BIN), PathBuf::from)
}

/// A PostgreSQL program, as `nobody` when the tests run as root.
fn command(program: &str) -> Command {
    let path = bin().join(program);
    if as_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(path);
        c
    } else {
        Command::new(path)
    }
}
