//! Choosing an audit store by URL: [`AuditStoreUrl`] names one,
//! [`open_audit_store`] opens it, ready to write.
//!
//! | URL | store |
//! |---|---|
//! | `sqlite:PATH`, `sqlite://PATH`, or a plain `PATH` | [`SqliteAuditStore`] (one file, one backend host) |
//! | `postgres://…`, `postgresql://…` | [`PostgresAuditStore`] (many backend replicas) |
//! | `memory:` | [`MemoryAuditStore`] (nothing survives the process) |

use super::postgres::{PostgresAuditStore, redact};
use super::sqlite::SqliteAuditStore;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use tether_turn::AuditStore;
use tether_turn::MemoryAuditStore;
use tether_turn::StoreError;

/// The URL forms, for messages.
const FORMS: &str = "use `sqlite:PATH` (or a plain path), `postgres://USER@HOST:PORT/DATABASE`, or `memory:`";

/// Which audit store a URL names.
#[derive(Clone, PartialEq, Eq)]
pub enum AuditStoreUrl {
    /// `memory:`.
    Memory,
    /// `sqlite:PATH`, `sqlite://PATH` or a plain path: the database file.
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`: the URL as given (it may hold a
    /// password; [`Display`](fmt::Display) hides it).
    Postgres(String),
}

impl AuditStoreUrl {
    /// The store `url` names.
    ///
    /// # Errors
    /// [`StoreError::Url`] for an empty URL, an unknown scheme, or a known
    /// one written wrongly; the message lists the forms that work.
    pub fn parse(url: &str) -> Result<AuditStoreUrl, StoreError> {
        let refuse = |reason: String| StoreError::Url { url: redact(url), reason: format!("{reason}; {FORMS}") };
        if url.is_empty() {
            return Err(refuse("it is empty".into()));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(AuditStoreUrl::Postgres(url.to_owned()));
        }
        if let Some(rest) = url.strip_prefix("sqlite:") {
            // `sqlite:///abs/path` and `sqlite://rel/path` as well as `sqlite:path`.
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(refuse("it names no file".into()));
            }
            return Ok(AuditStoreUrl::Sqlite(PathBuf::from(path)));
        }
        if url == "memory:" {
            return Ok(AuditStoreUrl::Memory);
        }
        // A scheme's name alone is a forgotten colon, not a file to create.
        if let word @ ("memory" | "sqlite" | "postgres" | "postgresql") = url {
            let meant = if word == "memory" { "`memory:`".to_owned() } else { format!("`{word}:…`") };
            return Err(refuse(format!(
                "`{word}` alone would be a SQLite file of that name; did you mean {meant}? (a file named so: `./{word}`)"
            )));
        }
        match scheme(url) {
            Some(scheme @ ("memory" | "postgres" | "postgresql")) => {
                Err(refuse(format!("a `{scheme}:` URL is written differently")))
            }
            Some(scheme) => Err(refuse(format!("`{scheme}` is not a store this backend knows"))),
            None => Ok(AuditStoreUrl::Sqlite(PathBuf::from(url))),
        }
    }

    /// Opens the store and makes it ready: the database is opened or
    /// connected and its tables created if missing, so a wrong path, an
    /// unreachable server or a refused login is reported here, not at the
    /// first tool call.
    ///
    /// # Errors
    /// [`StoreError::Url`] for a PostgreSQL URL the client cannot use;
    /// [`StoreError::Open`] when the database cannot be used.
    ///
    /// # Cancel safety
    /// Cancel-safe: a store dropped before it is returned shuts down cleanly.
    pub async fn open(&self) -> Result<Arc<dyn AuditStore>, StoreError> {
        Ok(match self {
            AuditStoreUrl::Memory => Arc::new(MemoryAuditStore::new()),
            AuditStoreUrl::Sqlite(path) => {
                let store = SqliteAuditStore::new(path);
                store.ready().await?;
                Arc::new(store)
            }
            AuditStoreUrl::Postgres(url) => {
                let store = PostgresAuditStore::new(url)?;
                store.ready().await?;
                Arc::new(store)
            }
        })
    }
}

/// The scheme of `url` when it has one (`name:` then `//`, or a known
/// name): a plain path such as `audit.db` or `./a:b.db` has none.
fn scheme(url: &str) -> Option<&str> {
    let (name, rest) = url.split_once(':')?;
    let is_scheme = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    let named = rest.starts_with("//") || ["memory", "postgres", "postgresql"].contains(&name);
    (is_scheme && named).then_some(name)
}

impl fmt::Display for AuditStoreUrl {
    /// The URL with any password hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuditStoreUrl::Memory => f.write_str("memory:"),
            AuditStoreUrl::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            AuditStoreUrl::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

impl fmt::Debug for AuditStoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuditStoreUrl({self})")
    }
}

/// Opens the store `url` names (see [`AuditStoreUrl`]) and makes it ready;
/// see [`AuditStoreUrl::open`].
///
/// # Errors
/// [`StoreError::Url`] for a URL no store takes; [`StoreError::Open`] when
/// the database cannot be used.
///
/// # Cancel safety
/// Cancel-safe: a store dropped before it is returned shuts down cleanly.
pub async fn open_audit_store(url: &str) -> Result<Arc<dyn AuditStore>, StoreError> {
    AuditStoreUrl::parse(url)?.open().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_names_its_store() {
        let cases = [
            ("memory:", AuditStoreUrl::Memory),
            ("sqlite:audit.db", AuditStoreUrl::Sqlite("audit.db".into())),
            ("sqlite:///var/lib/tether/audit.db", AuditStoreUrl::Sqlite("/var/lib/tether/audit.db".into())),
            ("sqlite://rel/audit.db", AuditStoreUrl::Sqlite("rel/audit.db".into())),
            ("/tmp/audit.db", AuditStoreUrl::Sqlite("/tmp/audit.db".into())),
            ("audit.db", AuditStoreUrl::Sqlite("audit.db".into())),
            ("./odd:name.db", AuditStoreUrl::Sqlite("./odd:name.db".into())),
            ("postgres://u@h:5432/db", AuditStoreUrl::Postgres("postgres://u@h:5432/db".into())),
            (
                "postgresql://u@h/db?connect_timeout=3",
                AuditStoreUrl::Postgres("postgresql://u@h/db?connect_timeout=3".into()),
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(AuditStoreUrl::parse(url).unwrap(), expected, "{url}");
        }
    }

    #[test]
    fn a_url_no_store_takes_is_refused_with_the_forms_that_work() {
        for (url, says) in [
            ("", "it is empty"),
            ("mysql://u@h/db", "`mysql` is not a store"),
            ("postgres:u@h/db", "a `postgres:` URL is written differently"),
            ("memory:big", "a `memory:` URL is written differently"),
            ("sqlite:", "it names no file"),
            ("memory", "did you mean `memory:`?"),
            ("postgres", "did you mean `postgres:…`?"),
        ] {
            let refused = AuditStoreUrl::parse(url).unwrap_err();
            let text = refused.to_string();
            assert!(matches!(refused, StoreError::Url { .. }), "{url}: {refused:?}");
            assert!(
                text.contains(says) && text.contains("sqlite:PATH") && text.contains("postgres://"),
                "{url}: {text}"
            );
        }
    }

    #[test]
    fn passwords_never_reach_a_message() {
        let url = AuditStoreUrl::parse("postgres://u:secret@h/db").unwrap();
        assert_eq!(url.to_string(), "postgres://u:***@h/db");
        assert!(!format!("{url:?}").contains("secret"));
        let refused = AuditStoreUrl::parse("mysql://u:secret@h/db").unwrap_err().to_string();
        assert!(!refused.contains("secret"), "{refused}");
    }
}
