//! Mistakes in a configuration file, as the person who wrote it reads them:
//! the file, the key, and what to write instead — and the complete example
//! `examples/tether.toml` loads.

use super::*;
use tether_backend::tools::ConfigError;

fn load(text: &str) -> (tempfile::TempDir, Result<Config, ConfigError>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tether.toml");
    std::fs::write(&path, text).unwrap();
    let result = Config::load(&path, &Vars::from_env());
    (dir, result)
}

#[test]
fn every_mistake_names_the_file_the_key_and_the_fix() {
    let cases = [
        ("[mcp.files]\ncomand = [\"x\"]\n", "`mcp.files.comand`: unknown key; did you mean `command`?"),
        (
            "[[tools]]\nname = \"w\"\nkind = \"htp\"\n",
            "`tools[0].kind`: `htp` is not a kind of tool; write one of: http, command, sqlite, static",
        ),
        (
            "[[tools]]\nname = \"w\"\nkind = \"http\"\ndescription = \"d\"\nurl = \"http://h\"\nheaders = { A = \"${TETHER_NO_SUCH_VAR}\" }\n",
            "`tools[0](`w`).headers.A`: the environment variable `TETHER_NO_SUCH_VAR` is not set; set it in the backend's environment",
        ),
        (
            "[[tools]]\nname = \"w\"\nkind = \"static\"\ndescription = \"d\"\nvalue = 1\ntimeout = \"fast\"\n",
            "`tools[0](`w`).timeout`: `fast` is not a duration",
        ),
        (
            "[mcp.files]\ncommand = [\"x\"]\nurl = \"http://h/mcp\"\n",
            "`mcp.files`: has both `command` and `url`; keep `command`",
        ),
        ("[[tools]\nname = 1\n", "`line 1, column"),
        (
            "[[tools]]\nname = \"w\"\nkind = \"command\"\ndescription = \"d\"\n",
            "`tools[0](`w`).command`: is missing or empty; write the program",
        ),
    ];
    for (text, expected) in cases {
        let (dir, result) = load(text);
        let error = result.expect_err(text).to_string();
        let file = format!("`{}`", dir.path().join("tether.toml").display());
        assert!(error.starts_with(&file), "the file first: {error}");
        assert!(error.contains(expected), "{text}\n  gave: {error}\n  wanted: {expected}");
    }
}

#[tokio::test]
async fn two_sources_giving_one_name_is_an_error_that_says_to_use_a_prefix() {
    let text = format!(
        "[[tools]]\nname = \"echo\"\nkind = \"static\"\ndescription = \"d\"\nvalue = 1\n[mcp.test]\ncommand = [{TEST_SERVER:?}]\n"
    );
    let (_dir, config) = config(&text, &Vars::from_env());
    let error = ToolSet::start(&config.tools).await.unwrap_err().to_string();
    assert!(
        error.contains(
            "`mcp.test`: its tool `echo` has the name of `static (tools[0](`echo`))`; give the server a `prefix`"
        ),
        "{error}"
    );
}

#[test]
fn the_complete_example_loads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    tether_cli::demo_db::create(&db).unwrap();
    let vars = Vars::from_env().set("TETHER_DEMO_DB", db.display().to_string()).set("WEATHER_TOKEN", "t");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tether.toml");
    let config = Config::load(&example, &vars).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.tool_names().len() >= 4, "every built-in kind: {:?}", config.tool_names());
    assert!(!config.server_names().is_empty());
    assert_eq!(config.turn.deadline, Some(std::time::Duration::from_secs(600)));
    let agents = &config.agents;
    assert_eq!(agents.agents.keys().collect::<Vec<_>>(), ["billing", "main"]);
    let offered = |caller| tether_backend::agent::effective_agent_tools(agents, Some(caller));
    assert_eq!(offered("main").iter().map(|e| e.agent.as_str()).collect::<Vec<_>>(), ["billing"], "never itself");
    assert!(offered("billing").is_empty(), "billing's own entry disables main; itself removed");
}
