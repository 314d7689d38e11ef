//! Typed stubs: what the model reads is what a script can call, and it is
//! Python the sandbox runs.

use super::*;

/// The names the stubs define a function for (not the `call(...)` forms).
fn stub_functions(stubs: &str) -> Vec<String> {
    stubs
        .lines()
        .filter_map(|line| line.strip_prefix("def "))
        .filter_map(|rest| rest.split('(').next())
        .filter(|name| !name.starts_with("_tool_"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_stubs_show_what_a_script_may_call_and_run_as_python_in_the_sandbox() {
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    let stubs = w.turn.script_stubs();

    // Exactly the tools a script is started with: no run_script, nothing deferred.
    let callable: Vec<String> = w.turn.callable_tools(1).into_iter().map(|def| def.name().to_owned()).collect();
    let defined = stub_functions(&stubs);
    assert!(!defined.is_empty(), "{stubs}");
    for name in &defined {
        assert!(callable.contains(name), "`{name}` is in the stubs but a script cannot call it");
    }
    for name in &callable {
        assert!(
            defined.contains(name) || stubs.contains(&format!("# call({name:?}")),
            "`{name}` is callable but not in the stubs:\n{stubs}"
        );
    }
    assert!(!stubs.contains("run_script"), "a script never sees the script tool");

    // The model reads them at the end of run_script's description.
    let listed = w.turn.tools_for_model();
    let description = listed
        .iter()
        .find_map(|tool| match tool {
            ListedTool::Full(def) if def.name() == "run_script" => Some(def.description().to_owned()),
            _ => None,
        })
        .expect("run_script is listed");
    assert!(description.ends_with(&format!("```python\n{stubs}```")), "{description}");

    // Every stubbed function is a function the script really has.
    let present = format!("[{}]\nlen([{}])", defined.join(", "), defined.join(", "));
    let run = w.script(&present, Value::Null).await;
    assert_eq!(script_value(&run), json!(defined.len()), "{run:?}");

    // And the stubs themselves are Python the guest parses and runs: each
    // stub takes the keyword arguments its signature declares.
    let source = format!("{stubs}\nr = get_contract(customer_id='c1')\n[r is None, 'parsed']");
    let run = w.script(&source, Value::Null).await;
    assert_eq!(script_value(&run), json!([true, "parsed"]), "{run:?}");
}

#[tokio::test]
async fn a_script_only_turn_offers_the_model_the_script_tool_alone_and_a_script_still_calls_every_tool() {
    let (_sidecar, client) = sidecar().await;
    let limits = TurnLimits { model_offer: ModelOffer::ScriptOnly, ..TurnLimits::default() };
    let w = world(&client, PolicyApprover::approve_all(), |b| b.limits(limits));
    let every = world(&client, PolicyApprover::approve_all(), |b| b);
    let names = |listed: Vec<ListedTool>| -> Vec<String> {
        listed
            .into_iter()
            .map(|tool| match tool {
                ListedTool::Full(def) => def.name().to_owned(),
                ListedTool::NameOnly(name) => format!("{name} (name only)"),
            })
            .collect()
    };
    let offered = names(w.turn.tools_for_model());
    assert!(offered.contains(&"run_script".to_owned()), "{offered:?}");
    assert!(!offered.contains(&"get_contract".to_owned()), "not offered twice: {offered:?}");
    let all = names(every.turn.tools_for_model());
    assert!(all.contains(&"get_contract".to_owned()) && all.len() > offered.len(), "{all:?}");
    // Deferred tools are still named, so the model can activate them.
    for name in all.iter().filter(|name| name.ends_with("(name only)")) {
        assert!(offered.contains(name), "{name}: {offered:?}");
    }

    // The stubs in run_script's description still give every tool, and a
    // script calls one through the same checks.
    assert_eq!(w.turn.script_stubs(), every.turn.script_stubs());
    let run = w.script("unwrap(get_contract(customer_id='c1'))['customer_id']", Value::Null).await;
    assert_eq!(script_value(&run), json!("c1"), "{run:?}");
}

#[tokio::test]
async fn a_search_turn_names_the_tools_and_the_model_finds_and_reads_the_stubs_it_needs() {
    let (_sidecar, client) = sidecar().await;
    let limits = TurnLimits { model_offer: ModelOffer::Search, ..TurnLimits::default() };
    let w = world(&client, PolicyApprover::approve_all(), |b| b.limits(limits));
    let full: Vec<ListedTool> = w.turn.tools_for_model().into_iter().collect();
    let offered: Vec<&str> = full
        .iter()
        .filter_map(|tool| match tool {
            ListedTool::Full(def) => Some(def.name()),
            ListedTool::NameOnly(_) => None,
        })
        .collect();
    for own in ["run_script", "search_tools", "describe_tools"] {
        assert!(offered.contains(&own), "{own}: {offered:?}");
    }
    assert!(!offered.contains(&"get_contract"), "not offered as a function: {offered:?}");
    let description = full
        .iter()
        .find_map(|tool| match tool {
            ListedTool::Full(def) if def.name() == "run_script" => Some(def.description().to_owned()),
            _ => None,
        })
        .unwrap();
    assert!(description.contains("get_contract") && description.contains("describe_tools"), "{description}");
    assert!(!description.contains("def get_contract"), "names only, no stubs: {description}");

    // The model finds the tool by words, and reads its stub.
    let found = w.model("q1", "search_tools", json!({"query": "customer contract", "limit": 2})).await;
    let matches = found.to_model_value()["value"]["matches"].clone();
    assert_eq!(matches[0]["name"], "get_contract", "{matches}");
    assert!(matches.as_array().unwrap().len() <= 2, "{matches}");
    let described = w.model("q2", "describe_tools", json!({"names": ["get_contract", "nope"]})).await;
    let described = described.to_model_value()["value"].clone();
    let stubs = described["stubs"].as_str().unwrap();
    assert!(stubs.contains("def get_contract("), "{stubs}");
    assert_eq!(stub_functions(stubs), ["get_contract"], "only the tool asked for: {stubs}");
    assert_eq!(described["unknown"], json!(["nope"]));
    let none = w.model("q3", "describe_tools", json!({"names": ["run_script"]})).await;
    assert_eq!(none.error_code(), Some("tool_not_found"), "a script cannot call run_script: {none:?}");

    // Scripts cannot search, and call the tool through the same checks.
    let run = w.script("unwrap(get_contract(customer_id='c1'))['customer_id']", Value::Null).await;
    assert_eq!(script_value(&run), json!("c1"), "{run:?}");
    assert!(!w.turn.script_stubs().contains("search_tools"), "meta tools are not in a script's stubs");
}
