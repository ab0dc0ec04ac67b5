//! The fleet database's address: `HERMES_OTEL_FLEET_URL`, parsed by
//! tokio-postgres in libpq's forms (`postgresql://user:pw@host:5432/db`,
//! `postgresql://user@/db?host=/run/postgresql` for a Unix-socket
//! directory, or `host=... dbname=...` key/value), and the connection.
//!
//! Owns: parsing, the password from `PGPASSWORD` when the URL has none (as
//! libpq does), the redacted form `status` and logs show (never the
//! password), TLS per `sslmode` (`disable`, `prefer`, the default, or
//! `require`; the server certificate is always verified against the
//! system's roots, so `require` is libpq's `verify-full`). Must not touch:
//! the store.

use std::ffi::OsString;
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::Client;

use crate::error::{Error, Result};

/// The variable that turns fleet budgets on.
pub const FLEET_URL_ENV: &str = "HERMES_OTEL_FLEET_URL";

/// libpq's password variable, used when the URL carries none.
pub const PASSWORD_ENV: &str = "PGPASSWORD";

/// How long a connection attempt may take when the URL does not say
/// (`connect_timeout`): a sync must not hang on a dead address.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The fleet database, resolved.
#[derive(Clone)]
pub struct FleetConfig {
    pg: tokio_postgres::Config,
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl FleetConfig {
    /// The fleet from the process environment; `None` when
    /// `HERMES_OTEL_FLEET_URL` is unset or empty (no fleet).
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_vars(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
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
        Ok(Some(cfg))
    }

    /// Parses a libpq URL or key/value string. The error never repeats the
    /// text, which may hold a password.
    pub fn parse(url: &str) -> Result<Self> {
        let mut pg = tokio_postgres::Config::from_str(url.trim()).map_err(|_| {
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
            pg.application_name("hermes-otel");
        }
        Ok(FleetConfig { pg })
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
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config());
        let (client, connection) = self.pg.connect(tls).await.map_err(pg_error)?;
        tokio::spawn(async move {
            // The client sees the failure on its next query.
            let _ = connection.await;
        });
        Ok(client)
    }
}

/// Client TLS over the system's trust roots (as the OTLP exporter uses).
fn tls_config() -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|_| {
            rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(rustls::DEFAULT_VERSIONS)
                .expect("ring supports the default TLS versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
}

/// A PostgreSQL error as ours: the server's message (never the URL).
pub fn pg_error(e: tokio_postgres::Error) -> Error {
    let text = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    Error::Other(format!("fleet database: {text}"))
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
    fn a_bad_url_is_refused_without_repeating_it() {
        let err = FleetConfig::parse("postgresql://ops:s3cret@host:notaport/db").expect_err("bad port");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(err.to_string().contains(FLEET_URL_ENV), "{err}");
    }
}
