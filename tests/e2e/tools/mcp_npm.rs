//! A real MCP server no one here wrote — `@modelcontextprotocol/server-filesystem`
//! from npm, pinned in `tests/npm/package-lock.json` — driven over stdio:
//! its tools listed under a prefix with their schemas, called from a Python
//! script in the sandbox through a real turn, one refused by policy, every
//! call audited.

use super::*;
use tether_backend::turn::{CallStatus, PolicyApprover, Step};

fn filesystem_config(root: &Path) -> String {
    format!(
        r#"
[mcp.files]
command = ["{bin}/mcp-server-filesystem", "{root}"]
prefix = "fs_"
include = ["list_directory", "read_text_file", "write_file"]
startup_timeout = "60s"

[mcp.files.tools.list_directory]
read_only = true

[mcp.files.tools.read_text_file]
read_only = true

[mcp.files.tools.write_file]
requires_approval = true
"#,
        bin = npm_bin().display(),
        root = root.display()
    )
}

const SCRIPT: &str = r#"
root = input["root"]
listing = unwrap(fs_list_directory(path=root))
text = unwrap(fs_read_text_file(path=root + "/notes.txt"))
written = fs_write_file(path=root + "/new.txt", content="written from a script")
{"listing": listing, "text": text, "written": written}
"#;

#[tokio::test]
async fn the_filesystem_server_from_npm_is_listed_called_from_a_script_refused_by_policy_and_audited() {
    let data = tempfile::tempdir().unwrap();
    // The server resolves symlinks (/tmp may be one): give it the real path.
    let root = data.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "renew Hooli by Friday\n").unwrap();
    std::fs::create_dir(root.join("archive")).unwrap();
    let (_dir, config) = config(&filesystem_config(&root), &Vars::from_env());
    let tools = ToolSet::start(&config.tools).await.unwrap();

    // Listed: only the included tools, under the prefix, with the server's schemas and the config's metadata.
    let names: Vec<&str> = tools.tools().iter().map(|t| t.name()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for name in ["fs_list_directory", "fs_read_text_file", "fs_write_file"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let read = tools.tools().iter().find(|t| t.name() == "fs_read_text_file").unwrap();
    assert_eq!(read.spec().input_schema["properties"]["path"]["type"], "string", "the server's input schema");
    assert!(read.spec().output_schema.is_some(), "the server's output schema");
    assert!(read.meta().read_only);
    let write = tools.tools().iter().find(|t| t.name() == "fs_write_file").unwrap();
    assert!(!write.meta().read_only, "unset keys: a tool has effects");
    assert_eq!(tools.servers().await[0].error, None, "the server is running");

    // A script calls them; the approver denies the write.
    let approver = Arc::new(PolicyApprover::deny_all());
    let world = World::new(tools, approver.clone()).await;
    let result = world.script(SCRIPT, json!({"root": root.display().to_string()})).await;
    assert_eq!(result["text"]["content"], "renew Hooli by Friday\n", "structuredContent: {result}");
    let listing = result["listing"]["content"].as_str().unwrap_or_default();
    assert!(listing.contains("[FILE] notes.txt") && listing.contains("[DIR] archive"), "{result}");
    assert_eq!(result["written"]["ok"], false);
    assert_eq!(result["written"]["error"]["code"], "approval_denied", "{result}");
    assert!(!root.join("new.txt").exists(), "a denied call never reaches the server");
    assert_eq!(approver.asked().len(), 1);
    assert_eq!(approver.asked()[0].args["content"], "written from a script", "the approver saw the exact arguments");

    // Audited: one row per call, with the script's origin and the step that refused.
    let listed = world.audit_row("s1/1").await;
    assert_eq!((listed.call.tool.as_str(), listed.status, listed.call.depth), ("fs_list_directory", CallStatus::Ok, 1));
    assert_eq!(listed.call.origin, "script");
    assert_eq!(world.audit_row("s1/2").await.status, CallStatus::Ok);
    let refused = world.audit_row("s1/3").await;
    assert_eq!(refused.call.tool, "fs_write_file");
    assert_eq!(
        (refused.status, refused.step, refused.code.as_deref()),
        (CallStatus::Failed, Some(Step::Approval), Some("approval_denied"))
    );
    assert!(world.turn.ledger().await.unwrap().is_empty(), "read-only calls and a refused write leave no ledger rows");

    // The server's own failure (a path outside its root) is a tool_failed value, not a crash.
    let outside = world.model("m1", "fs_read_text_file", json!({"path": "/etc/hostname"})).await;
    let (code, message) = error(&outside);
    assert_eq!(code, "tool_failed");
    assert!(
        message.contains("`fs_read_text_file` reported a failure") && message.contains("outside allowed directories"),
        "{message}"
    );
    assert_eq!(world.audit_row("m1").await.status, CallStatus::Error);
    world.tools.shutdown().await;
}
