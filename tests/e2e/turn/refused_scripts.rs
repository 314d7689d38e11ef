//! A script that cannot run is refused before its first call (issue 25): the
//! `run_script` call fails with `script_refused`, naming each line and how
//! to write it instead, no tool it calls runs, and the refusal is audited.

use super::*;

/// Two calls with effects, then a keyword `send_email`'s schema does not
/// have, then a construct monty does not compile: refused whole.
const EMAILS_THEN_A_TYPO: &str = "\
send_email(to='owner@acme.test', subject='Contract ended', body='Renew?')
send_email(to='cfo@acme.test', subject='Contract ended', body='FYI')
send_email(to='ceo@acme.test', subjet='Contract ended', body='FYI')
class Reminder(metaclass=type):
    pass
";

#[tokio::test]
async fn a_script_whose_third_line_cannot_run_is_refused_before_any_call_and_audited() {
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    let result = w.script(EMAILS_THEN_A_TYPO, Value::Null).await;

    let CallOutcome::ToolError { code, message } = &result.outcome else {
        panic!("the run_script call was not refused: {result:?}");
    };
    assert_eq!(code, "script_refused", "{message}");
    assert!(message.starts_with("the script was refused before it ran"), "{message}");
    assert!(
        message.contains(
            "- line 3, column 32: send_email() has no parameter 'subjet': did you mean 'subject'? pass only its \
             parameters: body, subject, to"
        ),
        "the line, the column and the rewrite: {message}"
    );
    assert!(
        message.contains(
            "- line 4, column 1: metaclasses and class keywords are not available here: write a plain class (a base \
             class of your own is fine)"
        ),
        "monty's own refusal, with its hint: {message}"
    );
    // What the model reads is the same failure value.
    assert_eq!(result.to_model_value()["error"]["code"], "script_refused");

    // Nothing of the script ran: no email went out, no call was made.
    assert_eq!(w.probe.runs("send_email"), 0);
    assert!(w.probe.world.outbox().is_empty());
    let rows = w.audit().await;
    assert_eq!(rows.len(), 1, "the run_script call alone, no nested call: {rows:#?}");
    let row = w.audit_row("s1").await;
    assert_eq!(
        (row.call.tool.as_str(), row.status, row.code.as_deref()),
        ("run_script", CallStatus::Error, Some("script_refused"))
    );
    let event = w.terminal_event("s1");
    assert!(format!("{event:?}").contains("script_refused"), "{event:?}");
}

#[tokio::test]
async fn the_same_script_written_as_its_stubs_say_runs_and_sends() {
    // The control: with the keyword fixed and a plain class, the calls happen.
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    let fixed = EMAILS_THEN_A_TYPO.replace("subjet=", "subject=").replace("(metaclass=type)", "");
    let result = w.script(&fixed, Value::Null).await;
    assert_eq!(result.status(), CallStatus::Ok, "{result:?}");
    assert_eq!(w.probe.runs("send_email"), 3);
}

/// An email goes out, then the script reaches a tool call the runtime would
/// make from inside itself: a special method and a `groupby` key. Where the
/// run would once have failed at that call, after the email, it is refused
/// before it starts.
const EMAIL_THEN_CALLS_THAT_CANNOT_PAUSE: &str = "\
import itertools
def lookup(customer):
    return get_contract(customer_id=customer)['value']
class Contracts:
    def __getitem__(self, customer):
        return lookup(customer)
def owner(customer):
    return lookup(customer)['owner_email']
send_email(to='owner@acme.test', subject='Contract ended', body='Renew?')
by_owner = {o: list(g) for o, g in itertools.groupby(['c1', 'c2'], key=owner)}
";

#[tokio::test]
async fn tool_calls_the_runtime_would_make_from_inside_itself_are_refused_before_any_call() {
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    let result = w.script(EMAIL_THEN_CALLS_THAT_CANNOT_PAUSE, Value::Null).await;
    let CallOutcome::ToolError { code, message } = &result.outcome else {
        panic!("the run_script call was not refused: {result:?}");
    };
    assert_eq!(code, "script_refused", "{message}");
    assert!(
        message.contains(
            "- line 5, column 9: Contracts.__getitem__ calls a tool, but the runtime calls __getitem__ from inside \
             itself, where a tool call cannot pause: make it a plain method (def getitem(self, ...)) and call that"
        ),
        "{message}"
    );
    assert!(
        message.contains(
            "- line 10, column 72: itertools.groupby() cannot pause for the tool calls of owner() here (it calls it \
             from inside the runtime)"
        ),
        "found through owner(), which calls the tool through lookup(): {message}"
    );
    assert_eq!(w.probe.runs("send_email"), 0);
    assert!(w.probe.world.outbox().is_empty());
}
