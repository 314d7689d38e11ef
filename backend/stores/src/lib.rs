//! The turn's audit stores: where a turn's audit rows and effect ledger go.
//!
//! Where things are:
//! - `group_commit`: the one writer thread with group commit that the SQL
//!   stores share (a turn's write waits for its group's commit, never for
//!   another turn's)
//! - `sqlite`: [`SqliteAuditStore`], the default (one host)
//! - `postgres`: [`PostgresAuditStore`] (many backend replicas)
//! - `url`: [`open_audit_store`] — a store chosen by URL (`sqlite:PATH`,
//!   `postgres://…`, `memory:`)
//! - [`conformance`]: the behaviour every [`AuditStore`] must have, a suite
//!   a store of your own runs from one test ([`conformance::check`]); SQLite,
//!   PostgreSQL and the memory store run it here
//! - `suite` (tests): that suite and group commit's own behaviour, per store
//!
//! The [`AuditStore`] trait and the in-memory store are the turn's own
//! (`tether-turn`).

#[cfg(doc)]
use tether_turn::AuditStore;
use tether_turn::StoreError;

pub mod conformance;
mod group_commit;
mod postgres;
mod sqlite;
#[cfg(test)]
mod suite;
mod url;

pub use group_commit::DEFAULT_QUEUE_CAPACITY;
pub use postgres::{DEFAULT_APPLICATION_NAME, DEFAULT_CONNECT_TIMEOUT, PostgresAuditStore};
pub use sqlite::SqliteAuditStore;
pub use url::{AuditStoreUrl, open_audit_store};

/// A database driver's error, as the turn's [`StoreError`] says it.
pub(crate) trait DriverError: std::error::Error + Send + Sync + Sized + 'static {
    /// The error with everything that explains it.
    fn into_store_error(self) -> StoreError {
        StoreError::database(self)
    }
}

impl DriverError for rusqlite::Error {}

impl DriverError for ::postgres::Error {
    fn into_store_error(self) -> StoreError {
        StoreError::database_with_message(crate::postgres::postgres_message(&self), self)
    }
}

/// `.map_err(db)`: a driver's error as a [`StoreError`].
pub(crate) fn db(error: impl DriverError) -> StoreError {
    error.into_store_error()
}
