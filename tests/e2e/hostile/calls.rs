//! Hostile tool calls: floods of calls and of batches, giant, deeply nested,
//! non-UTF-8 and non-JSON arguments, and tool names with odd characters.
//! Each bad call is a failure value (or a Python exception before anything
//! is sent) that names the problem; the script and its neighbours go on.

use super::*;
use tether_sidecar::SidecarConfig;

#[tokio::test]
async fn a_flood_of_ten_thousand_calls_stops_at_the_call_cap() {
    let client = shared_client().await;
    let source = "codes = {}\nfor i in range(10000):\n    r = call('ping')\n    c = 'ok' if r['ok'] else r['error']['code']\n    codes[c] = codes.get(c, 0) + 1\ncodes";
    let (outcome, recorder) = alongside(&client, run(&client, python(source))).await;
    assert_eq!(outcome.result, Some(json!({"ok": 50, "script_call_cap_reached": 9950})), "{outcome:#?}");
    assert_eq!(recorder.calls.lock().unwrap().len(), 50, "calls past the cap never reach the backend");
    assert_eq!(recorder.refused.lock().unwrap().len(), 1, "the breach is reported once");
    assert_eq!((outcome.stats.calls, outcome.stats.calls_refused_by_cap), (10000, 9950));
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_gather_of_ten_thousand_calls_is_one_batch_capped_at_fifty() {
    let client = shared_client().await;
    let source = "import asyncio\nrs = await asyncio.gather(*[call_async('ping') for _ in range(10000)])\n[sum(1 for r in rs if r['ok']), len(rs), rs[-1]['error']['code']]";
    let (outcome, recorder) = alongside(&client, run(&client, python(source))).await;
    assert_eq!(outcome.result, Some(json!([50, 10000, "script_call_cap_reached"])), "{outcome:#?}");
    let calls = recorder.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 50);
    assert!(calls.iter().all(|c| c.batch == 1 && c.batch_size == 50), "the forwarded part is one batch");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_gather_of_ten_thousand_calls_under_a_high_cap_is_answered_in_order() {
    // A sidecar that lets all 10,000 through: the stream, the backend client
    // and the guest carry one huge batch, and every result lands in its place.
    let mut config = test_config();
    config.limits.max_calls = 10_000;
    let (_sidecar, client) = sidecar_with(SidecarConfig { slots: 2, ..config }).await;
    let source = "import asyncio\nrs = await asyncio.gather(*[call_async('echo', i=i) for i in range(10000)])\nall(r['value']['i'] == i for i, r in enumerate(rs))";
    let (outcome, recorder) = run(&client, python(source)).await;
    assert_eq!(outcome.result, Some(json!(true)), "{outcome:#?}");
    assert_eq!(recorder.calls.lock().unwrap().len(), 10_000);
    assert_still_works(&client).await;
}

#[tokio::test]
async fn batches_of_refused_calls_cannot_get_past_the_cap_either() {
    let client = shared_client().await;
    let source = "import asyncio\nn = 0\nfor _ in range(100):\n    rs = await asyncio.gather(*[call_async('no_such_tool') for _ in range(100)])\n    n += len(rs)\nn";
    let (outcome, recorder) = run(&client, python(source)).await;
    assert_eq!(outcome.result, Some(json!(10_000)), "{outcome:#?}");
    assert_eq!(recorder.calls.lock().unwrap().len(), 50);
    assert_still_works(&client).await;
}

#[tokio::test]
async fn giant_arguments_are_refused_before_they_leave() {
    let client = shared_client().await;
    let source = "r = call('echo', data='x' * 5_000_000)\n[r['ok'], r['error']['code'], r['error']['message']]";
    let (outcome, recorder) = alongside(&client, run(&client, python(source))).await;
    let result = outcome.result.unwrap_or_else(|| panic!("{:#?}", outcome.error));
    assert_eq!((&result[0], &result[1]), (&json!(false), &json!("arguments_too_large")));
    assert!(result[2].as_str().unwrap().contains("max_args_bytes"), "{result}");
    assert!(recorder.calls.lock().unwrap().is_empty());
    assert_still_works(&client).await;
}

#[tokio::test]
async fn arguments_with_200_000_keys_are_refused_by_size() {
    let client = shared_client().await;
    let source = "r = call('echo', {str(i): i for i in range(200000)})\nr['error']['code']";
    let (outcome, recorder) = run(&client, python(source)).await;
    assert_eq!(outcome.result, Some(json!("arguments_too_large")), "{outcome:#?}");
    assert!(recorder.calls.lock().unwrap().is_empty());
    assert_still_works(&client).await;
}

#[tokio::test]
async fn deeply_nested_arguments_raise_before_anything_is_sent() {
    let client = shared_client().await;
    let source = "a = []\nfor _ in range(10000):\n    a = [a]\ncall('echo', a=a)";
    let (outcome, recorder) = run(&client, python(source)).await;
    assert_raised(&outcome, "ValueError", &["not JSON-serializable", "nested more than"]);
    assert!(recorder.calls.lock().unwrap().is_empty());
    assert_still_works(&client).await;
}

#[tokio::test]
async fn non_json_arguments_raise_what_json_dumps_would_naming_the_value() {
    let client = shared_client().await;
    // As `json.dumps` would: its exception types, its words.
    for (args, exception, mentions) in [
        ("data=b'\\xff\\xfe'", "TypeError", "Object of type bytes"),
        ("data=float('nan')", "ValueError", "Out of range float values"),
        ("data={1, 2}", "TypeError", "Object of type set"),
        ("data={(1, 2): 'tuple key'}", "TypeError", "keys must be str"),
        ("data=print", "TypeError", "is not JSON serializable"),
    ] {
        let (outcome, recorder) = run(&client, python(&format!("call('echo', {args})"))).await;
        assert_raised(&outcome, exception, &["not JSON-serializable", mentions]);
        assert!(recorder.calls.lock().unwrap().is_empty(), "{args}");
    }
    assert_still_works(&client).await;
}

#[tokio::test]
async fn arguments_that_are_not_an_object_raise_or_fail_without_being_sent() {
    let client = shared_client().await;
    let (outcome, recorder) = run(&client, python("call('echo', [1, 2, 3])")).await;
    assert_raised(&outcome, "TypeError", &["dict"]);
    assert!(recorder.calls.lock().unwrap().is_empty());
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_lone_surrogate_in_arguments_travels_as_valid_utf8() {
    // The script's text is UTF-8 already: the escape becomes U+FFFD, and the
    // stream only ever carries valid JSON.
    let client = shared_client().await;
    let (outcome, recorder) = run(&client, python("call('echo', data='\\udcff')['value']['data']")).await;
    assert_eq!(outcome.result, Some(json!("\u{fffd}")), "{outcome:#?}");
    assert_eq!(recorder.calls.lock().unwrap()[0].args, json!({"data": "\u{fffd}"}));
    assert_still_works(&client).await;
}

#[tokio::test]
async fn tool_names_with_odd_characters_reach_no_tool() {
    let client = shared_client().await;
    let names = [
        "",
        " ",
        "../../etc/passwd",
        "get_contract; rm -rf /",
        "get_contract\u{0}",
        "get_contract\n",
        "GET_CONTRACT",
        "名前",
        "🙂",
        "\u{202e}tcartnoc_teg",
        "$(id)",
        "get_contract/../send_email",
    ];
    let list = serde_json::to_string(&names).unwrap();
    let source = format!("[call(n, customer_id='c1')['error']['code'] for n in {list}]");
    let (outcome, recorder) = run(&client, python(&source)).await;
    let codes = outcome.result.unwrap_or_else(|| panic!("{:#?}", outcome.error));
    assert_eq!(codes, json!(vec!["tool_not_found"; names.len()]), "no odd name resolves to a real tool");
    let seen = recorder.names();
    assert_eq!(seen, names, "each name reaches the backend exactly as written");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_giant_tool_name_is_refused_without_breaking_the_stream() {
    let client = shared_client().await;
    let source = "r = call('x' * 9_000_000)\n[r['ok'], r['error']['code']]";
    let recorder = Recorder::new();
    let outcome = alongside(&client, client.run(python(source), recorder.as_ref())).await;
    let outcome = outcome.expect("the stream survives a giant tool name");
    let result = outcome.result.unwrap_or_else(|| panic!("{:#?}", outcome.error));
    assert_eq!((&result[0], &result[1]), (&json!(false), &json!("tool_not_found")), "{result}");
    let refused = recorder.refused.lock().unwrap().clone();
    assert_eq!(refused.len(), 1, "the backend hears of it, to audit it");
    assert!(
        refused[0].name.len() <= 256 && refused[0].message.contains("names are at most"),
        "{:?}",
        refused[0].message
    );
    assert_still_works(&client).await;
}
