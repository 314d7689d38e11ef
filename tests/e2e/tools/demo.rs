//! The demo world as `tether demo` builds it: a seeded SQLite database
//! behind the tools of `examples/demo.toml`, the demo script run through a
//! real turn, its emails in the database's outbox.

use super::*;
use tether_backend::turn::PolicyApprover;
use tether_cli::demo::{self, DemoWorld};
use tether_cli::demo_db;

async fn run_demo(approver: PolicyApprover) -> (tempfile::TempDir, PathBuf, Value) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    demo_db::create(&db).unwrap();
    let tools = ToolSet::start(&demo_db::config(&db).unwrap().tools).await.unwrap();
    let world = World::new(tools, Arc::new(approver)).await;
    let result = world.script(demo::SCRIPT, DemoWorld::input()).await;
    (dir, db, result)
}

fn sorted(value: &Value) -> Vec<String> {
    let mut items: Vec<String> = value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    items.sort();
    items
}

#[tokio::test]
async fn the_demo_script_over_the_sqlite_world_emails_the_owners_of_ended_contracts() {
    let (_dir, db, result) = run_demo(PolicyApprover::approve_all()).await;
    let (checked, mut emailed, mut no_contract) = DemoWorld::default().expected_summary();
    emailed.sort();
    no_contract.sort();
    assert_eq!(result["checked"], checked);
    assert_eq!(sorted(&result["emailed"]), emailed);
    assert_eq!(sorted(&result["no_contract"]), no_contract);

    let outbox = demo_db::outbox(&db).unwrap();
    let mut subjects: Vec<String> = outbox.iter().map(|e| e.subject.split(':').next().unwrap().to_owned()).collect();
    subjects.sort();
    assert_eq!(subjects, emailed, "one email per issue whose contract ended, in the outbox table");
    assert!(outbox.iter().all(|e| e.to.ends_with("@example.com")));
}

#[tokio::test]
async fn denied_emails_never_reach_the_outbox() {
    let (_dir, db, result) = run_demo(PolicyApprover::deny_all()).await;
    assert_eq!(result["emailed"], json!([]));
    assert!(demo_db::outbox(&db).unwrap().is_empty());
}
