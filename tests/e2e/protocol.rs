//! A backend that breaks the protocol gets a clear gRPC error; the sidecar is
//! unharmed.

use crate::support::*;
use tether_backend::pb::{self, backend_message, sidecar_client::SidecarClient as RawClient, sidecar_message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

fn start(source: &str) -> pb::BackendMessage {
    let request = demo_request(source);
    pb::BackendMessage {
        kind: Some(backend_message::Kind::Start(pb::Start {
            run_id: "raw".into(),
            parent_call_id: "p".into(),
            source: request.source,
            language: "python".into(),
            input_json: request.input.to_string(),
            ..Default::default()
        })),
    }
}

fn tool_result(id: &str) -> pb::BackendMessage {
    pb::BackendMessage {
        kind: Some(backend_message::Kind::ToolResult(pb::ToolResult {
            id: id.into(),
            outcome: Some(pb::tool_result::Outcome::ValueJson("1".into())),
        })),
    }
}

async fn raw_client(url: String) -> RawClient<tonic::transport::Channel> {
    RawClient::connect(url).await.unwrap()
}

#[tokio::test]
async fn a_first_message_that_is_not_start_is_invalid_argument() {
    let (sidecar, client) = sidecar().await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(tool_result("x")).await.unwrap();
    let status = raw_client(sidecar.url()).await.run(ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("must be `Start`"), "{status:?}");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn an_unknown_language_is_invalid_argument() {
    let (sidecar, client) = sidecar().await;
    let (tx, rx) = mpsc::channel(4);
    let mut message = start("1");
    if let Some(backend_message::Kind::Start(start)) = &mut message.kind {
        start.language = "cobol".into();
    }
    tx.send(message).await.unwrap();
    let status = raw_client(sidecar.url()).await.run(ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("cobol"), "{status:?}");
    assert_still_works(&client).await;
}

/// Starts a run that waits on a call, then sends `bad`; the stream must fail
/// with `code` (when given) and a message mentioning `mentions`.
async fn assert_protocol_error_mid_run(bad: impl FnOnce(&str) -> pb::BackendMessage, code: Option<Code>, mentions: &str) {
    let (sidecar, client) = sidecar().await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(start("call('anything')\n")).await.unwrap();
    let mut inbound = raw_client(sidecar.url()).await.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let call = match inbound.message().await.unwrap() {
        Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::ToolCall(call)) }) => call,
        other => panic!("expected a tool call, got {other:?}"),
    };
    tx.send(bad(&call.id)).await.unwrap();
    let status = inbound.message().await.unwrap_err();
    if let Some(code) = code {
        assert_eq!(status.code(), code);
    }
    assert!(status.message().contains(mentions), "{status:?}");
    let counters = &sidecar.sidecar;
    eventually(std::time::Duration::from_secs(5), "the run is gone", || counters.live_runs() == 0).await;
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_result_for_an_unknown_call_id_is_invalid_argument() {
    assert_protocol_error_mid_run(|id| tool_result(&format!("{id}-not-mine")), Some(Code::InvalidArgument), "unknown call id").await;
}

#[tokio::test]
async fn a_second_start_is_invalid_argument() {
    assert_protocol_error_mid_run(|_| start("1"), Some(Code::InvalidArgument), "only once").await;
}

#[tokio::test]
async fn a_result_over_the_message_size_limit_fails_the_stream_clearly() {
    let oversized = "x".repeat(test_config().max_message_bytes() + 1);
    let bad = move |id: &str| pb::BackendMessage {
        kind: Some(backend_message::Kind::ToolResult(pb::ToolResult {
            id: id.into(),
            outcome: Some(pb::tool_result::Outcome::ValueJson(format!("\"{oversized}\""))),
        })),
    };
    // The code is tonic's (the decoder refuses the message); the message is ours.
    assert_protocol_error_mid_run(bad, None, "reading the backend's stream failed").await;
}
