//! Kind `sqlite`: one parameterised query against a database file,
//! read-only unless the entry says `writable = true`.
//!
//! ```toml
//! [[tools]]
//! name = "get_contract"
//! kind = "sqlite"
//! description = "A customer's contract: customer, end_date, owner_email."
//! database = "${TETHER_DEMO_DB}"      # relative paths: from this file's folder
//! query = "SELECT customer, end_date, owner_email FROM contracts WHERE customer_id = :customer_id"
//! result = "row"                      # "rows" (default): a list of objects; "row": the first or null;
//!                                     # "changes": {"changes": n} for a write without RETURNING
//! on_empty = { code = "not_found", message = "no contract on file for customer `{customer_id}`" }
//! writable = false                    # default: opened read-only, and a query that writes is refused at load
//! max_rows = 1000                     # default 1000
//! ```
//!
//! Named parameters (`:name`, `@name`, `$name`) take the arguments of the
//! same name; without an `input_schema`, each is a required scalar. The
//! query is prepared when the file is loaded, so a typo in it, a missing
//! table or a write in a read-only tool is a configuration error, not a
//! failed call. Each call opens the file on the blocking pool (no async
//! worker waits on SQLite) and is interrupted if the call ends early.

use super::error::ConfigError;
use super::read::At;
use super::vars::fill;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tether_codes::Reason;
use tether_turn::{ToolContext, ToolError, ToolExecutor, ToolOutput};

/// The kind's own keys.
pub(crate) const KEYS: [&str; 6] = ["database", "query", "writable", "result", "on_empty", "max_rows"];

const DEFAULT_MAX_ROWS: usize = 1000;
/// How long a call waits for another writer's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize)]
struct Raw {
    database: Option<String>,
    query: Option<String>,
    #[serde(default)]
    writable: bool,
    #[serde(default)]
    result: ResultMode,
    on_empty: Option<OnEmpty>,
    max_rows: Option<usize>,
}

/// `result = "rows" | "row" | "changes"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ResultMode {
    /// Every row, as a list of objects.
    #[default]
    Rows,
    /// The first row as an object, or `null` (or `on_empty`'s failure).
    Row,
    /// `{"changes": n}`: rows a write changed.
    Changes,
}

/// `on_empty = { code, message }`: the tool's own failure when `result =
/// "row"` finds none; `{name}` in the message is the argument.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnEmpty {
    code: String,
    message: String,
}

/// A `sqlite` tool's keys, checked against the database.
#[derive(Debug, Clone)]
pub(crate) struct SqliteConfig {
    database: PathBuf,
    query: String,
    writable: bool,
    result: ResultMode,
    on_empty: Option<OnEmpty>,
    max_rows: usize,
    /// The parameter names, without their prefix.
    params: Vec<String>,
}

impl SqliteConfig {
    pub(crate) fn read(at: &At<'_>, table: &toml::Table) -> Result<SqliteConfig, ConfigError> {
        let raw: Raw = at.read(table, &KEYS)?;
        let Some(database) = raw.database else {
            return Err(at
                .error("database", "is missing")
                .fix("write the database file's path, e.g. `database = \"data/app.db\"`"));
        };
        let database = at.path("database", &database)?;
        let Some(query) = raw.query.filter(|q| !q.trim().is_empty()) else {
            return Err(at
                .error("query", "is missing")
                .fix("write one SQL statement with named parameters, e.g. `SELECT * FROM t WHERE id = :id`"));
        };
        if raw.on_empty.is_some() && raw.result != ResultMode::Row {
            return Err(at
                .error("on_empty", "applies only to `result = \"row\"`")
                .fix("remove it, or set `result = \"row\"`"));
        }
        if raw.max_rows == Some(0) {
            return Err(at.error("max_rows", "must be at least 1"));
        }
        let connection = open(&database, raw.writable).map_err(|e| {
            at.error("database", format!("cannot open `{}`: {e}", database.display())).fix(if raw.writable {
                "the file must exist and be writable"
            } else {
                "the file must exist (it is opened read-only)"
            })
        })?;
        let statement = connection.prepare(&query).map_err(|e| at.error("query", e.to_string()))?;
        if !raw.writable && !statement.readonly() {
            return Err(at.error("query", "writes to the database, but the tool is read-only").fix(
                "set `writable = true` (and consider `requires_approval = true`), or write a query that only reads",
            ));
        }
        if raw.result == ResultMode::Changes && statement.column_count() > 0 {
            return Err(at
                .error("result", "is \"changes\", but the query returns columns")
                .fix("use `result = \"row\"` or \"rows\" for a query with RETURNING or a SELECT"));
        }
        let mut params = Vec::new();
        for i in 1..=statement.parameter_count() {
            match statement.parameter_name(i) {
                Some(name) => params.push(name[1..].to_owned()),
                None => {
                    return Err(at
                        .error("query", "uses a positional parameter (`?`)")
                        .fix("name every parameter after the argument it takes, e.g. `:customer_id`"));
                }
            }
        }
        params.dedup();
        drop(statement);
        Ok(SqliteConfig {
            database,
            query,
            writable: raw.writable,
            result: raw.result,
            on_empty: raw.on_empty,
            max_rows: raw.max_rows.unwrap_or(DEFAULT_MAX_ROWS),
            params,
        })
    }

    /// Each parameter a required scalar, nothing else.
    pub(crate) fn default_input_schema(&self) -> Value {
        let properties: Map<String, Value> = self
            .params
            .iter()
            .map(|p| (p.clone(), json!({"type": ["string", "number", "integer", "boolean", "null"]})))
            .collect();
        json!({"type": "object", "properties": properties, "required": self.params, "additionalProperties": false})
    }

    /// A query that only reads has no effects.
    pub(crate) fn read_only_default(&self) -> bool {
        !self.writable
    }

    /// True when the tool may write (its metadata cannot then say read-only).
    pub(crate) fn writable(&self) -> bool {
        self.writable
    }

    pub(crate) fn executor(&self, tool: &str) -> Arc<dyn ToolExecutor> {
        Arc::new(SqliteTool { tool: tool.to_owned(), config: Arc::new(self.clone()) })
    }
}

fn open(path: &std::path::Path, writable: bool) -> rusqlite::Result<Connection> {
    let mode = if writable { OpenFlags::SQLITE_OPEN_READ_WRITE } else { OpenFlags::SQLITE_OPEN_READ_ONLY };
    let connection = Connection::open_with_flags(path, mode | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    if !writable {
        // Defence in depth: even a statement SQLite thought read-only cannot write.
        connection.pragma_update(None, "query_only", true)?;
    }
    Ok(connection)
}

struct SqliteTool {
    tool: String,
    config: Arc<SqliteConfig>,
}

/// Interrupts the query when the call ends early (time limit, cancellation).
struct Interrupt(Option<rusqlite::InterruptHandle>);

impl Drop for Interrupt {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.interrupt();
        }
    }
}

/// What a call's query came to, on the blocking pool.
enum Ran {
    Value(Value),
    Empty,
    TooManyRows,
}

fn to_sql(value: &Value) -> SqlValue {
    match value {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
        Value::Number(n) => {
            n.as_i64().map(SqlValue::Integer).unwrap_or_else(|| SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)))
        }
        Value::String(s) => SqlValue::Text(s.clone()),
        other => SqlValue::Text(other.to_string()),
    }
}

fn to_json(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        // A blob as lowercase hex: JSON has no bytes.
        ValueRef::Blob(b) => Value::String(b.iter().map(|byte| format!("{byte:02x}")).collect()),
    }
}

fn run(config: &SqliteConfig, connection: &Connection, args: &Value) -> rusqlite::Result<Ran> {
    let mut statement = connection.prepare(&config.query)?;
    for i in 1..=statement.parameter_count() {
        let value = statement.parameter_name(i).and_then(|name| args.get(&name[1..])).map_or(SqlValue::Null, to_sql);
        statement.raw_bind_parameter(i, value)?;
    }
    if config.result == ResultMode::Changes {
        return Ok(Ran::Value(json!({"changes": statement.raw_execute()?})));
    }
    let names: Vec<String> = statement.column_names().map(str::to_owned).collect();
    let mut rows = statement.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        if out.len() == config.max_rows {
            return Ok(Ran::TooManyRows);
        }
        let mut object = Map::new();
        for (i, name) in names.iter().enumerate() {
            object.insert(name.clone(), to_json(row.get_ref(i)?));
        }
        out.push(Value::Object(object));
        if config.result == ResultMode::Row {
            break;
        }
    }
    Ok(match config.result {
        ResultMode::Row => out.pop().map_or(Ran::Empty, Ran::Value),
        _ => Ran::Value(Value::Array(out)),
    })
}

#[async_trait::async_trait]
impl ToolExecutor for SqliteTool {
    async fn execute(&self, _context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let config = self.config.clone();
        let (handle_tx, handle_rx) = tokio::sync::oneshot::channel();
        let work = tokio::task::spawn_blocking(move || {
            let connection = open(&config.database, config.writable)?;
            let _ = handle_tx.send(connection.get_interrupt_handle());
            run(&config, &connection, &args).map(|ran| (ran, args))
        });
        let _interrupt = Interrupt(handle_rx.await.ok());
        let failed = |detail: String| ToolError::reported(&Reason::ToolReported { tool: self.tool.clone(), detail });
        match work.await {
            Ok(Ok((Ran::Value(value), _))) => Ok(ToolOutput::new(value)),
            Ok(Ok((Ran::Empty, args))) => match &self.config.on_empty {
                Some(on_empty) => Err(ToolError::new(on_empty.code.clone(), fill(&on_empty.message, &args))),
                None => Ok(ToolOutput::new(Value::Null)),
            },
            Ok(Ok((Ran::TooManyRows, _))) => Err(failed(format!(
                "the query returned more than `{}` rows (max_rows); ask for fewer, e.g. with narrower arguments",
                self.config.max_rows
            ))),
            Ok(Err(error)) => Err(failed(format!("the database answered: {error}"))),
            Err(join) => {
                tracing::error!(error = %join, "the sqlite query task failed");
                Err(ToolError::around(&Reason::ToolFailed { tool: self.tool.clone() }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vars::Vars;

    fn database() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let connection = Connection::open(&path).unwrap();
        connection
            .execute_batch("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER); INSERT INTO t VALUES ('a', 1), ('b', 2);")
            .unwrap();
        (dir, path)
    }

    fn read(path: &std::path::Path, rest: &str) -> Result<SqliteConfig, ConfigError> {
        let vars = Vars::from_env();
        let at = At { file: std::path::Path::new("t.toml"), key: "tools[0]".into(), vars: &vars };
        let text = format!("database = {:?}\n{rest}", path.display().to_string());
        SqliteConfig::read(&at, &text.parse().unwrap())
    }

    #[test]
    fn the_query_is_checked_at_load() {
        let (_dir, path) = database();
        let config = read(&path, "query = \"SELECT n FROM t WHERE id = :id\"").unwrap();
        assert_eq!(config.params, ["id"]);
        assert_eq!(config.default_input_schema()["required"], json!(["id"]));
        assert!(config.read_only_default());

        let typo = read(&path, "query = \"SELECT n FROM tt\"").unwrap_err().to_string();
        assert!(typo.contains("`tools[0].query`: no such table: tt"), "{typo}");
        let write = read(&path, "query = \"DELETE FROM t WHERE id = :id\"").unwrap_err().to_string();
        assert!(write.contains("writes to the database, but the tool is read-only; set `writable = true`"), "{write}");
        assert!(read(&path, "query = \"DELETE FROM t WHERE id = :id\"\nwritable = true\nresult = \"changes\"").is_ok());
        let positional = read(&path, "query = \"SELECT n FROM t WHERE id = ?\"").unwrap_err().to_string();
        assert!(positional.contains("positional parameter"), "{positional}");
        let missing = read(&path.with_file_name("nope.db"), "query = \"SELECT 1\"").unwrap_err().to_string();
        assert!(missing.contains("`tools[0].database`: cannot open") && missing.contains("must exist"), "{missing}");
        let on_empty =
            read(&path, "query = \"SELECT 1\"\non_empty = { code = \"x\", message = \"y\" }").unwrap_err().to_string();
        assert!(on_empty.contains("applies only to `result = \"row\"`"), "{on_empty}");
    }

    #[test]
    fn rows_become_objects_and_arguments_bind_by_name() {
        let (_dir, path) = database();
        let config =
            read(&path, "query = \"SELECT id, n, n * 1.5 AS f, NULL AS z FROM t WHERE n >= :min ORDER BY id\"")
                .unwrap();
        let connection = open(&path, false).unwrap();
        let Ran::Value(rows) = run(&config, &connection, &json!({"min": 2})).unwrap() else { panic!() };
        assert_eq!(rows, json!([{"id": "b", "n": 2, "f": 3.0, "z": null}]));
        let capped = SqliteConfig { max_rows: 1, ..read(&path, "query = \"SELECT id FROM t\"").unwrap() };
        assert!(matches!(run(&capped, &connection, &json!({})).unwrap(), Ran::TooManyRows));
    }

    #[test]
    fn a_read_only_connection_cannot_write_whatever_the_statement() {
        let (_dir, path) = database();
        let connection = open(&path, false).unwrap();
        let error = connection.execute("INSERT INTO t VALUES ('c', 3)", []).unwrap_err().to_string();
        assert!(error.contains("readonly") || error.contains("read-only") || error.contains("query_only"), "{error}");
    }
}
