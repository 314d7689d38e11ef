//! The demo world as a SQLite database and a tool configuration: `tether
//! demo` creates and seeds the database from [`DemoWorld`]'s data, and the
//! tools of `examples/demo.toml` query it; `send_email` writes to its
//! `outbox` table.

use crate::demo::{DemoWorld, Email};
use anyhow::Context;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use tether_backend::tools::{Config, Vars};

/// `examples/demo.toml`, built in so `tether demo` runs from any folder.
pub const CONFIG: &str = include_str!("../../../examples/demo.toml");
/// Where the built-in config says it comes from (for its messages).
pub const CONFIG_PATH: &str = "examples/demo.toml";
/// The variable the config reads the database path from.
pub const DB_VAR: &str = "TETHER_DEMO_DB";

const SCHEMA: &str = "
CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE contracts (
    customer_id TEXT PRIMARY KEY REFERENCES customers(id),
    end_date TEXT NOT NULL,
    owner_email TEXT NOT NULL
);
CREATE TABLE issues (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    opened TEXT NOT NULL
);
CREATE TABLE outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    to_addr TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    sent_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
";

/// The default database: in the temp folder, made afresh by every run.
pub fn default_path() -> PathBuf {
    std::env::temp_dir().join(format!("tether-demo-{}.db", std::process::id()))
}

/// Creates the database at `path` (replacing any file there) and seeds it
/// with [`DemoWorld`]'s data; the outbox starts empty.
///
/// # Errors
/// If the file cannot be replaced or written.
pub fn create(path: &Path) -> anyhow::Result<()> {
    let sibling = |suffix: &str| PathBuf::from(format!("{}{suffix}", path.display()));
    for stale in [path.to_owned(), sibling("-wal"), sibling("-shm")] {
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot replace `{}`", stale.display()));
            }
            _ => {}
        }
    }
    let mut connection = Connection::open(path).with_context(|| format!("cannot create `{}`", path.display()))?;
    let seed = connection.transaction()?;
    seed.execute_batch(SCHEMA)?;
    let world = DemoWorld::default();
    for (id, name) in DemoWorld::customers() {
        seed.execute("INSERT INTO customers (id, name) VALUES (?1, ?2)", (id, name))?;
    }
    for c in world.contracts() {
        seed.execute(
            "INSERT INTO contracts (customer_id, end_date, owner_email) VALUES (?1, ?2, ?3)",
            (&c.customer_id, &c.end_date, &c.owner_email),
        )?;
    }
    for i in world.issues() {
        seed.execute(
            "INSERT INTO issues (id, title, customer_id, opened) VALUES (?1, ?2, ?3, ?4)",
            (&i.id, &i.title, &i.customer_id, &i.opened),
        )?;
    }
    seed.commit()?;
    Ok(())
}

/// The demo's tool configuration over the database at `path`.
///
/// # Errors
/// If the database is missing or does not match the config's queries.
pub fn config(path: &Path) -> anyhow::Result<Config> {
    let vars = Vars::from_env().set(DB_VAR, path.display().to_string());
    Ok(Config::parse(CONFIG, Path::new(CONFIG_PATH), &vars)?)
}

/// The emails in the database's outbox, oldest first.
///
/// # Errors
/// If the database cannot be read.
pub fn outbox(path: &Path) -> anyhow::Result<Vec<Email>> {
    let connection = Connection::open(path)?;
    let mut statement = connection.prepare("SELECT to_addr, subject FROM outbox ORDER BY id")?;
    let emails = statement.query_map([], |row| Ok(Email { to: row.get(0)?, subject: row.get(1)? }))?;
    Ok(emails.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeded_database_satisfies_the_demo_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.db");
        create(&path).unwrap();
        let config = config(&path).unwrap();
        assert_eq!(config.tool_names(), ["list_issues", "get_contract", "send_email"]);
        create(&path).unwrap();
        assert!(outbox(&path).unwrap().is_empty(), "a fresh world has an empty outbox");
    }
}
