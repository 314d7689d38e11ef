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
