//! The built-in kinds against real things: `http` against an HTTP server
//! this test starts on loopback, `command` with real processes, `sqlite`
//! with a real database file, `static`.

use super::*;
use axum::extract::Path as UrlPath;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use std::sync::Mutex;
use std::time::Duration;
use tether_backend::turn::{CallStatus, PolicyApprover};

/// What the HTTP server saw: path and `authorization` header of each request.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

async fn http_server() -> (String, Seen, tokio_util::sync::DropGuard) {
    let seen: Seen = Arc::default();
    let record = |seen: &Seen| {
        let seen = seen.clone();
        move |uri: axum::http::Uri, headers: &HeaderMap| {
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            seen.lock().unwrap().push((uri.path().to_owned(), auth));
        }
    };
    let (r1, r2) = (record(&seen), record(&seen));
    let app = axum::Router::new()
        .route(
            "/weather/{city}",
            get(move |UrlPath(city): UrlPath<String>, uri: axum::http::Uri, headers: HeaderMap| async move {
                r1(uri, &headers);
                axum::Json(json!({"city": city, "temp": 21}))
            }),
        )
        .route(
            "/orders",
            post(move |uri: axum::http::Uri, headers: HeaderMap, axum::Json(body): axum::Json<Value>| async move {
                r2(uri, &headers);
                (StatusCode::CREATED, axum::Json(json!({"received": body})))
            }),
        )
        .route("/missing", get(|| async { (StatusCode::NOT_FOUND, "no such thing") }))
        .route("/big", get(|| async { axum::Json(json!("x".repeat(5000))) }))
        .route("/text", get(|| async { "plain words" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned()).await.unwrap();
    });
    (url, seen, stop.drop_guard())
}

#[tokio::test]
async fn http_tools_are_requests_the_backend_makes() {
    let (url, seen, _stop) = http_server().await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let text = format!(
        r#"
[[tools]]
name = "weather"
kind = "http"
description = "Today's weather in a city."
url = "{url}/weather/{{city}}"
headers = {{ Authorization = "Bearer ${{TEST_WEATHER_TOKEN}}" }}
read_only = true

[[tools]]
name = "order"
kind = "http"
description = "Places an order."
method = "POST"
url = "{url}/orders"

[[tools]]
name = "missing"
kind = "http"
description = "A page that is not there."
url = "{url}/missing"

[[tools]]
name = "big"
kind = "http"
description = "Too much."
url = "{url}/big"
max_output_bytes = 1000

[[tools]]
name = "text"
kind = "http"
description = "Plain text."
url = "{url}/text"

[[tools]]
name = "down"
kind = "http"
description = "Nothing listens here."
url = "http://{closed}/x"
"#
    );
    let (_dir, config) = config(&text, &Vars::from_env().set("TEST_WEATHER_TOKEN", "s3cret"));
    let tools = ToolSet::start(&config.tools).await.unwrap();
    let world = World::new(tools, Arc::new(PolicyApprover::approve_all())).await;

    // From a script: the arguments fill the URL, percent-encoded, and the header comes from the backend.
    let result = world.script("unwrap(weather(city=input['city']))", json!({"city": "São Paulo/../admin"})).await;
    assert_eq!(result, json!({"city": "São Paulo/../admin", "temp": 21}));
    assert_eq!(
        seen.lock().unwrap()[0],
        ("/weather/S%C3%A3o%20Paulo%2F..%2Fadmin".to_owned(), Some("Bearer s3cret".to_owned())),
        "an argument cannot change the path; the secret never passed through the script"
    );

    let order = ok(&world.model("o", "order", json!({"item": "pen", "count": 2})).await);
    assert_eq!(order, json!({"received": {"item": "pen", "count": 2}}), "a POST sends the arguments as JSON");
    assert_eq!(ok(&world.model("t", "text", json!({})).await), json!("plain words"), "text that is not JSON");

    let missing = world.model("m", "missing", json!({})).await;
    assert_eq!(
        error(&missing),
        ("tool_failed".into(), "`missing` reported a failure: HTTP 404 Not Found: no such thing".into())
    );
    assert_eq!(missing.status(), CallStatus::Error);
    let rows = world.turn.audit_log().await.unwrap();
    let row = rows.iter().find(|row| row.call.call_id == "m").unwrap();
    assert_eq!(
        (row.code.as_deref(), row.detail.as_deref()),
        (Some("tool_failed"), Some("`missing` reported a failure: HTTP 404 Not Found: no such thing")),
        "the audit keeps the status and body with the code"
    );

    let big = world.model("b", "big", json!({})).await;
    let (code, message) = error(&big);
    assert_eq!(code, "result_too_large");
    assert!(message.contains("`1000`-byte limit (max_output_bytes"), "{message}");

    let down = world.model("d", "down", json!({})).await;
    let (code, message) = error(&down);
    assert_eq!(code, "tool_failed");
    assert!(
        message.contains("`down` was not run: the HTTP endpoint `http://127.0.0.1:") && message.contains("not made"),
        "{message}"
    );
}

#[tokio::test]
async fn command_tools_are_processes_with_json_in_and_out() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleeper.pid");
    let text = format!(
        r#"
[[tools]]
name = "wrap"
kind = "command"
description = "Wraps its arguments."
command = ["sh", "-c", "printf '{{\"got\": '; cat; printf ', \"greeting\": \"%s\"}}' \"$GREETING\""]
env = {{ GREETING = "hello" }}

[[tools]]
name = "boom"
kind = "command"
description = "Fails."
command = ["sh", "-c", "echo 'the disk is full' >&2; exit 7"]

[[tools]]
name = "chatty"
kind = "command"
description = "Prints something that is not JSON."
command = ["sh", "-c", "echo not json"]

[[tools]]
name = "hang"
kind = "command"
description = "Starts a child and never ends."
command = ["sh", "-c", "sleep 30 & echo $! > {pidfile}; wait"]
timeout = "300ms"

[[tools]]
name = "missing"
kind = "command"
description = "A program that is not there."
command = ["/nonexistent/tool"]
"#,
        pidfile = pidfile.display()
    );
    let (_dir, config) = config(&text, &Vars::from_env());
    let world = World::new(ToolSet::start(&config.tools).await.unwrap(), Arc::new(PolicyApprover::approve_all())).await;

    let result = world.script("unwrap(wrap(n=1, s='x'))", json!({})).await;
    assert_eq!(result, json!({"got": {"n": 1, "s": "x"}, "greeting": "hello"}), "stdin and env");

    let boom = world.model("b", "boom", json!({})).await;
    assert_eq!(
        error(&boom),
        ("tool_failed".into(), "`boom` reported a failure: exited with status 7; stderr ends: the disk is full".into())
    );

    let chatty = world.model("c", "chatty", json!({})).await;
    let (code, message) = error(&chatty);
    assert_eq!(code, "invalid_result");
    assert!(message.contains("its output is not JSON") && message.contains("not json"), "{message}");
    assert_eq!(chatty.status(), CallStatus::Undelivered, "the command ran");

    let hang = world.model("h", "hang", json!({})).await;
    assert_eq!(error(&hang).0, "tool_timeout");
    let sleeper: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    crate::support::eventually(Duration::from_secs(5), "the command's child was killed with its group", || {
        !alive(sleeper)
    })
    .await;

    let missing = world.model("m", "missing", json!({})).await;
    let (code, message) = error(&missing);
    assert_eq!(code, "tool_failed");
    assert!(
        message.contains("the command `/nonexistent/tool` is not available") && message.contains("not made"),
        "{message}"
    );
}

#[tokio::test]
async fn sqlite_tools_query_a_real_file_and_only_writable_ones_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.db");
    let connection = rusqlite::Connection::open(&db).unwrap();
    connection
        .execute_batch("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL); INSERT INTO items (name, price) VALUES ('pen', 1.5), ('ink', 4.0), ('pad', 2.25);")
        .unwrap();
    drop(connection);
    let text = r#"
[[tools]]
name = "cheaper_than"
kind = "sqlite"
description = "Items under a price."
database = "shop.db"
query = "SELECT name, price FROM items WHERE price < :max ORDER BY price"

[[tools]]
name = "item"
kind = "sqlite"
description = "One item."
database = "shop.db"
query = "SELECT id, name, price FROM items WHERE name = :name"
result = "row"
on_empty = { code = "not_found", message = "no item called `{name}`" }

[[tools]]
name = "add_item"
kind = "sqlite"
description = "Adds an item."
database = "shop.db"
writable = true
query = "INSERT INTO items (name, price) VALUES (:name, :price) RETURNING id"
result = "row"

[[tools]]
name = "catalogue"
kind = "static"
description = "The catalogue's name."
value = { name = "Spring", pages = 12 }
"#;
    std::fs::write(dir.path().join("tether.toml"), text).unwrap();
    let config = Config::load(dir.path().join("tether.toml"), &Vars::from_env()).unwrap();
    let tools = ToolSet::start(&config.tools).await.unwrap();
    let meta = |name: &str| tools.tools().iter().find(|t| t.name() == name).unwrap().meta().clone();
    assert!(meta("item").read_only && !meta("add_item").read_only, "read-only unless writable");
    let world = World::new(tools, Arc::new(PolicyApprover::approve_all())).await;

    let script = r#"
cheap = unwrap(cheaper_than(max=3))
added = unwrap(add_item(name="nib", price=0.5))
found = item(name="nib")
absent = item(name="quill")
{"cheap": cheap, "added": added, "found": found["value"], "absent": absent["error"], "catalogue": unwrap(catalogue())}
"#;
    let result = world.script(script, json!({})).await;
    assert_eq!(result["cheap"], json!([{"name": "pen", "price": 1.5}, {"name": "pad", "price": 2.25}]));
    assert_eq!(result["added"], json!({"id": 4}));
    assert_eq!(result["found"], json!({"id": 4, "name": "nib", "price": 0.5}), "the write is in the file");
    assert_eq!(result["absent"], json!({"code": "not_found", "message": "no item called `quill`"}));
    assert_eq!(result["catalogue"], json!({"name": "Spring", "pages": 12}));
    let ledger = world.turn.ledger().await.unwrap();
    assert_eq!(
        ledger.iter().map(|e| e.call.tool.as_str()).collect::<Vec<_>>(),
        ["add_item"],
        "only the write has effects"
    );

    // A read-only tool whose query writes is refused when the file is loaded, never run.
    let write = text.replace(
        "query = \"SELECT name, price FROM items WHERE price < :max ORDER BY price\"",
        "query = \"DELETE FROM items WHERE price < :max\"",
    );
    std::fs::write(dir.path().join("bad.toml"), write).unwrap();
    let error = Config::load(dir.path().join("bad.toml"), &Vars::from_env()).unwrap_err().to_string();
    assert!(error.contains("bad.toml`, `tools[0](`cheaper_than`).query`: writes to the database, but the tool is read-only; set `writable = true`"), "{error}");
    let count: i64 =
        rusqlite::Connection::open(&db).unwrap().query_row("SELECT count(*) FROM items", [], |r| r.get(0)).unwrap();
    assert_eq!(count, 4, "nothing was deleted");
}
