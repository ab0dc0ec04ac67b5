//! The fleet database's address: `HERMES_METER_FLEET_URL`, parsed by
//! tokio-postgres in libpq's forms (`postgresql://user:pw@host:5432/db`,
//! `postgresql://user@/db?host=/run/postgresql` for a Unix-socket
//! directory, or `host=... dbname=...` key/value), and the connection.
//!
//! Owns: parsing, the password from `PGPASSWORD` or the password file
//! (`PGPASSFILE`, else `~/.pgpass`) when the URL has none (as libpq does),
//! the redacted form `status` and logs show (never the
//! password), TLS per `sslmode` (`disable`, `prefer`, the default,
//! `require`, `verify-ca`, `verify-full`: the server certificate is always
//! verified, so the last three are one), the libpq TLS files tokio-postgres
//! does not read itself (`sslrootcert`, `sslcert`, `sslkey`, or
//! `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`), taken out of the text before
//! it is parsed. Must not touch: the store.

use std::ffi::OsString;
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::Client;

use hermes_meter_store::error::{Error, Result};

/// The variable that turns fleet budgets on (named with the settings).
pub use crate::config::fleet::FLEET_URL_ENV;

/// libpq's password variable, used when the URL carries none.
pub(crate) const PASSWORD_ENV: &str = "PGPASSWORD";

/// libpq's password file variable; the default is `~/.pgpass`.
pub(crate) const PASSFILE_ENV: &str = "PGPASSFILE";

/// libpq's TLS file parameters and the variables that stand in for them.
const TLS_FILES: [(&str, &str); 3] = [
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
];

/// How long a connection attempt may take when the URL does not say
/// (`connect_timeout`): a sync must not hang on a dead address.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The fleet database, resolved.
#[derive(Clone)]
pub struct FleetConfig {
    pg: tokio_postgres::Config,
    /// `sslrootcert`, `sslcert`, `sslkey`, in [`TLS_FILES`] order.
    tls_files: [Option<std::path::PathBuf>; 3],
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl FleetConfig {
    /// The fleet from the process environment; `None` when
    /// `HERMES_METER_FLEET_URL` is unset or empty (no fleet).
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_vars(crate::config::fleet::var)
    }

    /// [`FleetConfig::from_env`] from any environment.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<Option<Self>> {
        let Some(url) = var(FLEET_URL_ENV) else { return Ok(None) };
        let mut cfg = Self::parse(&url.to_string_lossy())?;
        if cfg.pg.get_password().is_none() {
            if let Some(pw) = var(PASSWORD_ENV) {
                cfg.pg.password(pw.to_string_lossy().as_bytes());
            }
        }
        if cfg.pg.get_password().is_none() {
            // As libpq: the password file, when it is private to its owner.
            let file = var(PASSFILE_ENV)
                .map(std::path::PathBuf::from)
                .or_else(|| var("HOME").map(|h| std::path::Path::new(&h).join(".pgpass")));
            if let Some(pw) = file
                .and_then(|f| read_private(&f))
                .and_then(|text| cfg.password_in(&text))
            {
                cfg.pg.password(pw.as_bytes());
            }
        }
        for (slot, (_, env)) in cfg.tls_files.iter_mut().zip(TLS_FILES) {
            if slot.is_none() {
                *slot = var(env).map(std::path::PathBuf::from);
            }
        }
        Ok(Some(cfg))
    }

    /// The password a `.pgpass` text gives this connection: the first line
    /// whose host, port, database and user match (`*` matches anything; a
    /// socket directory matches `localhost` or its path, as in libpq).
    fn password_in(&self, pgpass: &str) -> Option<String> {
        let port = self.pg.get_ports().first().copied().unwrap_or(5432).to_string();
        let user = self.pg.get_user().unwrap_or("");
        let db = self.pg.get_dbname().unwrap_or(user);
        let hosts: Vec<String> = self
            .pg
            .get_hosts()
            .iter()
            .flat_map(|h| match h {
                Host::Tcp(name) => vec![name.clone()],
                #[cfg(unix)]
                Host::Unix(dir) => vec!["localhost".to_string(), dir.display().to_string()],
            })
            .collect();
        pgpass_lines(pgpass).find_map(|fields| {
            let [h, p, d, u, pw] = fields.as_slice() else {
                return None;
            };
            let hit = |pattern: &str, value: &str| pattern == "*" || pattern == value;
            (hosts.iter().any(|host| hit(h, host)) && hit(p, &port) && hit(d, db) && hit(u, user)).then(|| pw.clone())
        })
    }

    /// Parses a libpq URL or key/value string. The error never repeats the
    /// text, which may hold a password.
    pub fn parse(url: &str) -> Result<Self> {
        let (rest, tls_files) = take_tls_files(url.trim());
        let mut pg = tokio_postgres::Config::from_str(&rest).map_err(|_| {
            Error::Other(format!(
                "{FLEET_URL_ENV} is not a PostgreSQL URL in libpq form \
                 (postgresql://user@host/db, or postgresql://user@/db?host=/run/postgresql)"
            ))
        })?;
        if pg.get_hosts().is_empty() {
            return Err(Error::Other(format!(
                "{FLEET_URL_ENV} names no host or socket directory"
            )));
        }
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        if pg.get_application_name().is_none() {
            pg.application_name("hermes-meter");
        }
        Ok(FleetConfig { pg, tls_files })
    }

    /// The address without secrets: `postgresql://user@host:port/db`, a
    /// socket directory as `?host=`. For `status` and logs.
    pub fn redacted(&self) -> String {
        let user = self.pg.get_user().unwrap_or("");
        let db = self.pg.get_dbname().unwrap_or(user);
        let port = self.pg.get_ports().first().copied().unwrap_or(5432);
        let mut tcp = Vec::new();
        let mut sockets = Vec::new();
        for h in self.pg.get_hosts() {
            match h {
                Host::Tcp(name) => tcp.push(format!("{name}:{port}")),
                #[cfg(unix)]
                Host::Unix(dir) => sockets.push(dir.display().to_string()),
            }
        }
        let at = if user.is_empty() {
            String::new()
        } else {
            format!("{user}@")
        };
        let mut out = format!("postgresql://{at}{}/{db}", tcp.join(","));
        if !sockets.is_empty() {
            out.push_str(&format!("?host={}&port={port}", sockets.join(",")));
        }
        out
    }

    /// Connects (TLS as `sslmode` says) and drives the connection on the
    /// current tokio runtime.
    pub async fn connect(&self) -> Result<Client> {
        let read = |i: usize| -> Result<Option<Vec<u8>>> {
            self.tls_files[i]
                .as_ref()
                .map(|p| std::fs::read(p).map_err(|e| Error::io(p, e)))
                .transpose()
        };
        // `sslrootcert=system` is libpq's name for the system's roots.
        let ca = match self.tls_files[0].as_ref().is_some_and(|p| p.as_os_str() == "system") {
            true => None,
            false => read(0)?,
        };
        let (cert, key) = (read(1)?, read(2)?);
        let client = cert.as_deref().zip(key.as_deref());
        let config = crate::export::transport::client_tls_config(ca.as_deref(), client, "fleet database tls")?;
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(config);
        let (client, connection) = self.pg.connect(tls).await.map_err(pg_error)?;
        tokio::spawn(async move {
            // The client sees the failure on its next query.
            let _ = connection.await;
        });
        Ok(client)
    }
}

/// Takes libpq's TLS file parameters out of a URL's query or a key/value
/// string (tokio-postgres refuses what it does not know) and reads
/// `sslmode=verify-ca` and `verify-full` as `require`, which verifies the
/// certificate and the host name here anyway. Other parameters are left as
/// they were, byte for byte.
fn take_tls_files(text: &str) -> (String, [Option<std::path::PathBuf>; 3]) {
    let mut files: [Option<std::path::PathBuf>; 3] = [None, None, None];
    let url = text.starts_with("postgres://") || text.starts_with("postgresql://");
    let (head, params, sep) = match (url, text.split_once('?')) {
        (true, Some((head, query))) => (format!("{head}?"), query, '&'),
        (true, None) => return (text.to_string(), files),
        (false, _) => (String::new(), text, ' '),
    };
    let mut kept = Vec::new();
    for param in params.split(sep) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let decoded = match url {
            true => percent_encoding::percent_decode_str(value)
                .decode_utf8_lossy()
                .into_owned(),
            false => value.to_string(),
        };
        if let Some(i) = TLS_FILES.iter().position(|(k, _)| *k == key.trim()) {
            files[i] = Some(std::path::PathBuf::from(decoded));
        } else if key.trim() == "sslmode" && matches!(decoded.as_str(), "verify-ca" | "verify-full") {
            kept.push("sslmode=require".to_string());
        } else {
            kept.push(param.to_string());
        }
    }
    (format!("{head}{}", kept.join(&sep.to_string())), files)
}

/// A PostgreSQL error as ours: the server's message (never the URL).
pub(crate) fn pg_error(e: tokio_postgres::Error) -> Error {
    let text = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => {
            // The cause says what to fix (an unknown issuer, a refused
            // connection); tokio-postgres's own text only says where.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            text
        }
    };
    Error::Other(format!("fleet database: {text}"))
}

/// The fields of each entry of a `.pgpass` text: `#` comments and blank
/// lines skipped, `\:` and `\\` unescaped.
fn pgpass_lines(text: &str) -> impl Iterator<Item = Vec<String>> + '_ {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|line| {
            let mut fields = vec![String::new()];
            let mut chars = line.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => fields.last_mut().expect("one field").extend(chars.next()),
                    ':' if fields.len() < 5 => fields.push(String::new()),
                    c => fields.last_mut().expect("one field").push(c),
                }
            }
            fields
        })
}

/// A password file's text, if only its owner may read it (libpq ignores a
/// file others can read, and so do we).
fn read_private(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: Vec<(String, OsString)> = pairs.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        move |name| map.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn no_url_is_no_fleet() {
        assert!(FleetConfig::from_vars(vars(&[])).expect("ok").is_none());
    }

    #[test]
    fn a_socket_directory_is_a_host_and_the_password_is_never_shown() {
        let cfg = FleetConfig::from_vars(vars(&[(
            FLEET_URL_ENV,
            "postgresql://ops:s3cret@/budgets?host=/run/postgresql&port=5433",
        )]))
        .expect("parse")
        .expect("set");
        assert_eq!(
            cfg.redacted(),
            "postgresql://ops@/budgets?host=/run/postgresql&port=5433"
        );
        assert!(!format!("{cfg:?}").contains("s3cret"));
        let tcp = FleetConfig::parse("postgresql://ops:pw@db.internal:6432/fleet?sslmode=require").expect("tcp");
        assert_eq!(tcp.redacted(), "postgresql://ops@db.internal:6432/fleet");
    }

    #[test]
    fn pgpassword_fills_in_a_missing_password_only() {
        let url = "postgresql://ops@/budgets?host=/tmp";
        let cfg = FleetConfig::from_vars(vars(&[(FLEET_URL_ENV, url), (PASSWORD_ENV, "fromenv")]))
            .expect("parse")
            .expect("set");
        assert_eq!(cfg.pg.get_password(), Some(&b"fromenv"[..]));
        let cfg = FleetConfig::from_vars(vars(&[
            (FLEET_URL_ENV, "postgresql://ops:inurl@/budgets?host=/tmp"),
            (PASSWORD_ENV, "fromenv"),
        ]))
        .expect("parse")
        .expect("set");
        assert_eq!(cfg.pg.get_password(), Some(&b"inurl"[..]));
    }

    #[test]
    fn a_private_pgpass_file_gives_the_password_as_libpq_reads_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:*:wrong\nlocalhost:5433:budgets:ops:s3c\\:ret\n*:*:*:ops:fallback\n",
        )
        .expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let path = file.to_string_lossy().into_owned();
        let resolve = |url: &str, passfile: &str| {
            let cfg = FleetConfig::from_vars(vars(&[(FLEET_URL_ENV, url), (PASSFILE_ENV, passfile)]))
                .expect("parse")
                .expect("set");
            cfg.pg.get_password().map(|p| String::from_utf8_lossy(p).into_owned())
        };
        // A socket directory matches `localhost`; `\:` is a colon.
        let socket = "postgresql://ops@/budgets?host=/run/postgresql&port=5433";
        assert_eq!(resolve(socket, &path).as_deref(), Some("s3c:ret"));
        assert_eq!(
            resolve("postgresql://ops@db:5432/fleet", &path).as_deref(),
            Some("fallback")
        );
        assert_eq!(
            resolve("postgresql://ops:inurl@db/fleet", &path).as_deref(),
            Some("inurl")
        );
        assert_eq!(resolve("postgresql://nobody@db/fleet", &path), None);
        // A file others may read is ignored, as libpq ignores it.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(resolve(socket, &path), None);
    }

    #[test]
    fn libpq_tls_files_and_verify_modes_are_understood() {
        let cfg = FleetConfig::parse(
            "postgresql://ops@db:5432/fleet?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .expect("url");
        assert_eq!(cfg.tls_files[0].as_deref(), Some(std::path::Path::new("/etc/ca.pem")));
        assert_eq!(cfg.pg.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        assert_eq!(cfg.pg.get_application_name(), Some("x"));
        let kv = FleetConfig::parse("host=db dbname=fleet sslmode=verify-ca sslcert=/c.pem sslkey=/k.pem").expect("kv");
        assert_eq!(kv.tls_files[1].as_deref(), Some(std::path::Path::new("/c.pem")));
        assert_eq!(kv.tls_files[2].as_deref(), Some(std::path::Path::new("/k.pem")));
        assert_eq!(kv.pg.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        let env = FleetConfig::from_vars(vars(&[
            (FLEET_URL_ENV, "postgresql://ops@db/fleet"),
            ("PGSSLROOTCERT", "/env/ca.pem"),
        ]))
        .expect("parse")
        .expect("set");
        assert_eq!(env.tls_files[0].as_deref(), Some(std::path::Path::new("/env/ca.pem")));
    }

    #[test]
    fn a_bad_url_is_refused_without_repeating_it() {
        let err = FleetConfig::parse("postgresql://ops:s3cret@host:notaport/db").expect_err("bad port");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(err.to_string().contains(FLEET_URL_ENV), "{err}");
    }
}
