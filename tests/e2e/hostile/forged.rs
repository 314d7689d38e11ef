//! A backend (or whoever holds a stream) forging tool results: ids never
//! issued, already answered, issued to another run; results with no outcome
//! or a value that is not JSON. A forged id ends that run with `Finished`
//! status PROTOCOL_ERROR naming the id; it never reaches another run.

use super::*;
use tether_backend::pb::{backend_message, sidecar_client::SidecarClient as RawClient, sidecar_message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

fn start(parent_call_id: &str, source: &str) -> pb::BackendMessage {
    pb::BackendMessage {
        kind: Some(backend_message::Kind::Start(pb::Start {
            run_id: format!("forged-{parent_call_id}"),
            parent_call_id: parent_call_id.into(),
            source: source.into(),
            language: "python".into(),
            ..Default::default()
        })),
    }
}

fn answer(id: &str, value_json: &str) -> pb::BackendMessage {
    pb::BackendMessage {
        kind: Some(backend_message::Kind::ToolResult(pb::ToolResult {
            id: id.into(),
            outcome: Some(pb::tool_result::Outcome::ValueJson(value_json.into())),
        })),
    }
}

/// A raw run: the sender for backend messages and the sidecar's stream.
struct RawRun {
    to_sidecar: mpsc::Sender<pb::BackendMessage>,
    from_sidecar: Streaming<pb::SidecarMessage>,
}

impl RawRun {
    async fn open(parent_call_id: &str, source: &str) -> RawRun {
        let (to_sidecar, receiver) = mpsc::channel(16);
        to_sidecar.send(start(parent_call_id, source)).await.unwrap();
        let mut client = RawClient::connect(shared_url()).await.unwrap();
        let from_sidecar = client.run(ReceiverStream::new(receiver)).await.unwrap().into_inner();
        RawRun { to_sidecar, from_sidecar }
    }

    async fn send(&self, message: pb::BackendMessage) {
        // A closed stream shows up as the status read next.
        let _ = self.to_sidecar.send(message).await;
    }

    /// The next message that is not output.
    async fn next(&mut self) -> Result<sidecar_message::Kind, tonic::Status> {
        loop {
            match self.from_sidecar.message().await? {
                Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::Output(_)) }) => continue,
                Some(pb::SidecarMessage { kind: Some(kind) }) => return Ok(kind),
                other => panic!("unexpected end of the stream: {other:?}"),
            }
        }
    }

    async fn next_call(&mut self) -> pb::ToolCall {
        match self.next().await {
            Ok(sidecar_message::Kind::ToolCall(call)) => call,
            other => panic!("expected a tool call, got {other:?}"),
        }
    }

    async fn finished(&mut self) -> pb::Finished {
        match self.next().await {
            Ok(sidecar_message::Kind::Finished(finished)) => finished,
            other => panic!("expected `Finished`, got {other:?}"),
        }
    }

    /// The run must end with `Finished` status PROTOCOL_ERROR mentioning
    /// `mentions` (every message before it is skipped).
    async fn assert_refused(mut self, mentions: &str) {
        let finished = loop {
            match self.next().await {
                Ok(sidecar_message::Kind::Finished(finished)) => break finished,
                Ok(_) => continue,
                Err(status) => panic!("expected `Finished`, the stream failed: {status:?}"),
            }
        };
        assert_eq!(finished.status(), pb::RunStatus::ProtocolError, "{finished:?}");
        let error = finished.error.unwrap_or_default();
        assert!(error.message.contains(mentions), "expected `{mentions}` in {error:?}");
    }
}

#[tokio::test]
async fn a_result_for_an_id_not_yet_issued_is_refused() {
    // Guessing the next id ahead of the script.
    let mut run = RawRun::open("guess", "call('a')\ncall('b')\n").await;
    let first = run.next_call().await;
    assert_eq!(first.id, "guess/1");
    run.send(answer("guess/2", "\"forged\"")).await;
    run.assert_refused("for call id `guess/2`").await;
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn a_result_before_any_call_is_refused_and_stops_the_run() {
    let run = RawRun::open("early", "while True:\n    pass\n").await;
    run.send(answer("early/1", "1")).await;
    run.assert_refused("for call id `early/1`").await;
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn a_second_result_for_an_answered_id_is_refused() {
    let mut run = RawRun::open("twice", "a = call('a')\nb = call('b')\n[a, b]").await;
    let first = run.next_call().await;
    run.send(answer(&first.id, "1")).await;
    let second = run.next_call().await;
    assert_eq!(second.id, "twice/2");
    run.send(answer(&first.id, "1")).await;
    run.assert_refused("for call id `twice/1`").await;
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn a_stream_cannot_answer_another_runs_call() {
    // Both runs have the same parent call id, so their call ids are equal as
    // text; each stream still answers only its own run.
    let mut a = RawRun::open("same", "r = call('tool')\nr['value']").await;
    let mut b = RawRun::open("same", "r = call('tool')\nr['value']").await;
    let (call_a, call_b) = (a.next_call().await, b.next_call().await);
    assert_eq!(call_a.id, call_b.id);
    b.send(answer(&call_b.id, "\"for b\"")).await;
    let finished_b = b.finished().await;
    assert_eq!(finished_b.result_json, "\"for b\"");
    // A still waits on its own call, untouched by B's answer.
    a.send(answer(&call_a.id, "\"for a\"")).await;
    assert_eq!(a.finished().await.result_json, "\"for a\"");
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn a_forged_id_on_one_stream_leaves_the_other_run_waiting_for_its_own_answer() {
    let mut a = RawRun::open("victim", "r = call('tool')\nr['value']").await;
    let mut b = RawRun::open("forger", "r = call('tool')\nr['value']").await;
    let call_a = a.next_call().await;
    b.next_call().await;
    // B tries to answer A's call by its id.
    b.send(answer(&call_a.id, "\"forged\"")).await;
    b.assert_refused(&format!("for call id `{}`", call_a.id)).await;
    a.send(answer(&call_a.id, "\"genuine\"")).await;
    assert_eq!(a.finished().await.result_json, "\"genuine\"");
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn a_result_with_no_outcome_is_refused() {
    let mut run = RawRun::open("empty", "call('a')").await;
    let call = run.next_call().await;
    let empty = pb::BackendMessage {
        kind: Some(backend_message::Kind::ToolResult(pb::ToolResult { id: call.id.clone(), outcome: None })),
    };
    run.send(empty).await;
    run.assert_refused("has neither").await;
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn an_empty_backend_message_is_refused() {
    let mut run = RawRun::open("blank", "call('a')").await;
    run.next_call().await;
    run.send(pb::BackendMessage { kind: None }).await;
    run.assert_refused("no content").await;
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn a_value_that_is_not_json_fails_that_call_only() {
    let source = "r = call('a')\nok = call('b')\n[r['ok'], r['error']['code'], ok['value']]";
    let mut run = RawRun::open("notjson", source).await;
    let first = run.next_call().await;
    run.send(answer(&first.id, "{not json")).await;
    let second = run.next_call().await;
    run.send(answer(&second.id, "2")).await;
    let finished = run.finished().await;
    assert_eq!(finished.status, pb::RunStatus::Ok as i32, "{finished:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&finished.result_json).unwrap(),
        json!([false, "invalid_result", 2])
    );
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn a_batch_answered_in_reverse_reaches_the_script_in_call_order() {
    let source = "import asyncio\nrs = await asyncio.gather(*[call_async('t', i=i) for i in range(5)])\n[r['value'] for r in rs]";
    let mut run = RawRun::open("reverse", source).await;
    let mut calls = Vec::new();
    for _ in 0..5 {
        calls.push(run.next_call().await);
    }
    for call in calls.iter().rev() {
        let i: serde_json::Value = serde_json::from_str(&call.args_json).unwrap();
        run.send(answer(&call.id, &i["i"].to_string())).await;
    }
    let finished = run.finished().await;
    assert_eq!(finished.result_json, "[0,1,2,3,4]", "{finished:?}");
    assert_still_works(&shared_client().await).await;
}
