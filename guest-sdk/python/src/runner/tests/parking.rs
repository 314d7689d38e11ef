//! Parking: a run parked at a batch and resumed with its results ends as
//! one that waited, and a state the runtime cannot read ends the run cleanly.

use super::*;

const PARKED_STATE_INVALID: &str = "parked_state_invalid";

/// `doc` resuming from `state` with `results` as the answer.
fn resumed(doc: &StartDoc, state: &[u8], results: Vec<CallResult>) -> StartDoc {
    StartDoc { resume: Some(Resume::new(state, results)), ..doc.clone() }
}

/// Runs `doc` parked at its `at`th batch, then resumed from that state with
/// the batch's results: the two runs, in order.
fn park_and_resume(doc: &StartDoc, sleep: SleepBudget, answer: fn(&CallRequest) -> CallResult, at: usize) -> [Run; 2] {
    let first = run_host(doc, sleep, answer, Some(at));
    let Some(state) = first.parked.clone() else { panic!("the run did not park at batch {at}: {:?}", first.outcome) };
    let results = first.batches[at].iter().map(answer).collect();
    // The budget given here is ignored: a resumed run goes on with its own.
    let second = run_host(&resumed(doc, &state, results), SleepBudget::new(Duration::from_secs(3600)), answer, None);
    [first, second]
}

/// Asserts that `parts`, one run parked and then resumed (perhaps several
/// times over), did what `unparked` did: same batches, output and outcome.
fn assert_same_as(parts: &[Run], unparked: &Run, what: &str) {
    let batches: Vec<_> = parts.iter().flat_map(|run| run.batches.clone()).collect();
    assert_eq!(batches, unparked.batches, "{what}: the batches differ (a resumed run must not start over)");
    let output: String = parts.iter().map(|run| run.output.as_str()).collect();
    assert_eq!(output, unparked.output, "{what}: stdout differs");
    let errors: String = parts.iter().map(|run| run.errors.as_str()).collect();
    assert_eq!(errors, unparked.errors, "{what}: stderr differs");
    let last = parts.last().map(|run| &run.outcome);
    assert_eq!(last, Some(&unparked.outcome), "{what}: the outcome differs");
    assert!(parts[..parts.len() - 1].iter().all(|run| run.outcome.is_none()), "{what}: a part did not park");
}

/// Fifty calls, one after another, the last ones depending on the first:
/// a loop, a dict, a function frame, a caught failure, a sleep, output on
/// both streams.
const FIFTY_CALLS: &str = "
import sys, time

totals = {'even': 0, 'odd': 0}
seen = []

def step(i):
    if i == 7:
        try:
            unwrap(call('fail', i=i))
        except RuntimeError as e:
            print('caught', e, file=sys.stderr)
            return 0
    r = unwrap(add(i=i)) if i % 2 else unwrap(call('add', {'i': i}, twice=i * 2))
    return r['args']['i']

for i in range(50):
    n = step(i)
    totals['even' if n % 2 == 0 else 'odd'] += n
    seen.append(n)
    if i % 10 == 0:
        print('at', i, totals)
    if i == 25:
        time.sleep(0.01)
{'totals': totals, 'count': len(seen), 'last': seen[-3:]}
";

fn fifty_calls() -> StartDoc {
    start_doc(FIFTY_CALLS, &["add"], Value::Null)
}

#[test]
fn a_run_parked_at_any_of_fifty_calls_ends_as_one_never_parked() {
    let doc = fifty_calls();
    let unparked = run_doc(doc.clone(), SleepBudget::default());
    assert_eq!(unparked.batches.len(), 50);
    assert_eq!(value(&unparked)["count"], json!(50));
    assert!(unparked.errors.contains("caught tool call failed"), "{}", unparked.errors);
    let mut sizes = Vec::new();
    for at in 0..50 {
        let parts = park_and_resume(&doc, SleepBudget::default(), echo, at);
        sizes.push(parts[0].parked.as_ref().map_or(0, Vec::len));
        assert_same_as(&parts, &unparked, &format!("parked at call {at}"));
    }
    let (smallest, largest) = (sizes.iter().min().copied(), sizes.iter().max().copied());
    eprintln!("fifty calls: state sizes {smallest:?}..={largest:?} bytes");
    assert!(largest.is_some_and(|largest| largest < 16 * 1024), "{sizes:?}");
}

#[test]
fn a_run_parked_at_every_one_of_fifty_calls_ends_as_one_never_parked() {
    let doc = fifty_calls();
    let unparked = run_doc(doc.clone(), SleepBudget::default());
    let mut parts = vec![run_host(&doc, SleepBudget::default(), echo, Some(0))];
    while let Some(last) = parts.last()
        && let Some(state) = &last.parked
    {
        let results = last.batches[0].iter().map(echo).collect();
        let next = resumed(&doc, state, results);
        parts.push(run_host(&next, SleepBudget::default(), echo, Some(0)));
        assert!(parts.len() <= 51, "the run parked more often than it made calls");
    }
    assert_eq!(parts.len(), 51, "one park per call, then the last part completes");
    assert_same_as(&parts, &unparked, "parked at every call");
}

#[test]
fn a_gather_parked_and_resumed_ends_as_one_never_parked() {
    let source = "
import asyncio

async def nap(s):
    await asyncio.sleep(s)
    return s

later = call_async('later', n=0)
print('before', call('first')['value']['tool'])
rs = await asyncio.gather(call_async('a', n=1), nap(0.01), call_async('b'), call_async('c', x=True))
print('after', rs[1])
[unwrap(rs[0])['args'], rs[1], unwrap(rs[2])['tool'], unwrap(rs[3])['args'], unwrap(await later)['tool']]
";
    let doc = start_doc(source, &[], Value::Null);
    let unparked = run_doc(doc.clone(), SleepBudget::default());
    assert_eq!(value(&unparked), &json!([{"n": 1}, 0.01, "b", {"x": true}, "later"]));
    // `later` waits unsent across the first batch, then joins the gather's.
    let names: Vec<Vec<&str>> =
        unparked.batches.iter().map(|batch| batch.iter().map(|call| call.name.as_str()).collect()).collect();
    assert_eq!(names, [vec!["first"], vec!["later", "a", "b", "c"]]);
    for at in 0..unparked.batches.len() {
        let parts = park_and_resume(&doc, SleepBudget::default(), echo, at);
        assert_same_as(&parts, &unparked, &format!("gather parked at batch {at}"));
    }
}

#[test]
fn an_awaited_call_parked_and_resumed_ends_as_one_never_parked() {
    let source = "a = await call_async('a', n=1)\nprint(a['value'])\nb = await call_async('b')\n[a['value']['tool'], b['value']['tool']]";
    let doc = start_doc(source, &[], Value::Null);
    let unparked = run_doc(doc.clone(), SleepBudget::default());
    assert_eq!(unparked.batches.len(), 2);
    for at in 0..2 {
        let parts = park_and_resume(&doc, SleepBudget::default(), echo, at);
        assert_same_as(&parts, &unparked, &format!("awaited call parked at batch {at}"));
    }
}

/// The demo's tools: a contract for each customer, and an email that is sent.
fn demo_answer(call: &CallRequest) -> CallResult {
    match call.name.as_str() {
        "get_contract" => {
            let customer = call.args["customer_id"].as_str().unwrap_or_default();
            CallResult::Ok(
                json!({"customer": customer, "owner": format!("{customer}@example.com"), "renews": "2027-01-01"}),
            )
        }
        "send_email" => CallResult::Ok(json!({"sent": true, "to": call.args["to"]})),
        _ => echo(call),
    }
}

#[test]
fn a_demo_like_script_parks_in_a_few_kilobytes() {
    let source = "
issues = [
    {'id': 'ISS-101', 'customer': 'acme'},
    {'id': 'ISS-102', 'customer': 'globex'},
    {'id': 'ISS-103', 'customer': 'initech'},
    {'id': 'ISS-104', 'customer': 'umbrella'},
]
emailed = []
for issue in issues:
    contract = unwrap(get_contract(customer_id=issue['customer']))
    r = send_email(to=contract['owner'], subject=f\"{issue['id']}: renewal\", body=f\"renews {contract['renews']}\")
    if r['ok']:
        emailed.append(issue['id'])
    else:
        print('not sent:', r['error']['code'])
{'emailed': emailed}
";
    let doc = start_doc(source, &["get_contract", "send_email"], Value::Null);
    let unparked = run_host(&doc, SleepBudget::default(), demo_answer, None);
    assert_eq!(value(&unparked), &json!({"emailed": ["ISS-101", "ISS-102", "ISS-103", "ISS-104"]}));
    let mut sizes = Vec::new();
    for at in 0..unparked.batches.len() {
        let parts = park_and_resume(&doc, SleepBudget::default(), demo_answer, at);
        sizes.push(parts[0].parked.as_ref().map_or(usize::MAX, Vec::len));
        assert_same_as(&parts, &unparked, &format!("demo parked at batch {at}"));
    }
    eprintln!("demo-like script: state sizes by batch {sizes:?} bytes");
    assert!(sizes.iter().all(|size| *size < 8 * 1024), "{sizes:?}");
}

#[test]
fn the_sleep_budget_carries_across_a_park() {
    let source = "import time\ntime.sleep(0.06)\ncall('a')\ntime.sleep(0.03)\ncall('b')\ntime.sleep(0.02)\n'done'\n";
    let doc = start_doc(source, &[], Value::Null);
    let budget = SleepBudget::new(Duration::from_millis(100));
    let unparked = run_doc(doc.clone(), budget.clone());
    let limit = failure(&unparked);
    assert_eq!((limit.kind.as_str(), limit.line), (SLEEP_LIMIT, 6), "{limit:?}");
    for at in 0..2 {
        let parts = park_and_resume(&doc, budget.clone(), echo, at);
        assert_same_as(&parts, &unparked, &format!("sleep budget parked at batch {at}"));
    }
    // Within the budget, parked or not, the script completes.
    let roomy = SleepBudget::new(Duration::from_millis(120));
    let parts = park_and_resume(&doc, roomy.clone(), echo, 1);
    assert_same_as(&parts, &run_doc(doc, roomy), "within the budget");
    assert_eq!(value(&parts[1]), &json!("done"));
}

#[test]
fn a_host_that_declines_the_state_gets_the_run_going_on() {
    let doc = start_doc("x = call('a')\nprint('got', x['ok'])\ncall('b')['value']['tool']", &[], Value::Null);
    let mut printer = Printer::new(io::sink(), io::sink());
    let mut sizes = Vec::new();
    let host = |calls: Vec<CallRequest>, park: &mut ParkState<'_>| {
        // Too small a state is none; asked again (the host declines it), the run waits on.
        assert_eq!(park(16), None);
        sizes.push(park(u64::MAX).map_or(0, |state| state.len()));
        calls.iter().map(echo).collect()
    };
    let outcome = run_with_sleep_budget(&doc, host, &mut printer, SleepBudget::default());
    assert_eq!(outcome, Outcome::Ok(json!("b")));
    assert!(sizes.len() == 2 && sizes.iter().all(|size| *size > 0), "{sizes:?}");
}

#[test]
fn a_resumed_batch_the_host_answers_short_fails_the_calls_it_lacks() {
    let doc = start_doc("r = call('a')\nr['error']['code']", &[], Value::Null);
    let first = run_host(&doc, SleepBudget::default(), echo, Some(0));
    let Some(state) = first.parked else { panic!("the run did not park") };
    let run = run_host(&resumed(&doc, &state, Vec::new()), SleepBudget::default(), echo, None);
    assert_eq!(value(&run), &json!(Failure::from(&Reason::MissingResult).code));
}

/// Parks `source` at its first call and gives back the state.
fn parked_state(source: &str) -> Vec<u8> {
    let run = run_host(&start_doc(source, &[], Value::Null), SleepBudget::default(), echo, Some(0));
    run.parked.unwrap_or_else(|| panic!("`{source}` did not park: {:?}", run.outcome))
}

/// Asserts `run` ended as a state it could not read, its message having `says`.
fn assert_invalid_state(run: &Run, says: &str) {
    let error = failure(run);
    assert_eq!(error.kind, PARKED_STATE_INVALID, "{error:?}");
    assert!(error.message.contains(says), "{error:?} does not say {says:?}");
    assert!(error.message.ends_with("start the script again"), "{error:?}");
    assert!(run.batches.is_empty() && run.output.is_empty(), "nothing of the script ran");
}

#[test]
fn a_state_the_runtime_cannot_read_ends_the_run_as_parked_state_invalid() {
    let source = "print('top')\nx = call('a')\nprint('after')\nx['ok']";
    let doc = start_doc(source, &[], Value::Null);
    let state = parked_state(source);
    let results = || vec![echo(&request("a", json!({})))];
    let resume = |bytes: &[u8]| run_host(&resumed(&doc, bytes, results()), SleepBudget::default(), echo, None);

    // The state itself resumes.
    assert_eq!(value(&resume(&state)), &json!(true));

    assert_invalid_state(&resume(&[]), "is empty");
    for cut in [1, 8, 20, 40, state.len() / 2, state.len() - 1] {
        assert_invalid_state(&resume(&state[..cut]), "truncated");
    }
    assert_invalid_state(&resume(b"this is not a parked state"), "not one tether-python wrote");
    let mut longer = state.clone();
    longer.push(0);
    assert_invalid_state(&resume(&longer), "truncated or damaged");
    for at in [30, state.len() / 2, state.len() - 1] {
        let mut flipped = state.clone();
        flipped[at] ^= 0x40;
        assert_invalid_state(&resume(&flipped), "truncated or damaged");
    }
    let mut garbage = state[..8].to_vec();
    garbage.extend((0..2000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    assert_invalid_state(&resume(&garbage), "");
    let mut other_format = state.clone();
    other_format[8] = 2;
    assert_invalid_state(&resume(&other_format), "format version `2`");

    let not_base64 = StartDoc { resume: Some(Resume { state: "%%%".into(), results: results() }), ..doc.clone() };
    assert_invalid_state(&run_host(&not_base64, SleepBudget::default(), echo, None), "not base64");
}

#[test]
fn a_state_resumed_under_another_script_is_refused() {
    // The host binds a state to its run, so this is a host bug; the runtime
    // refuses it by name rather than run one script's code with another's text.
    let state = parked_state("x = call('a')\n'first'");
    let other = start_doc("y = call('a')\n'second'", &[], Value::Null);
    let run =
        run_host(&resumed(&other, &state, vec![echo(&request("a", json!({})))]), SleepBudget::default(), echo, None);
    assert_invalid_state(&run, "belongs to another script");
}
