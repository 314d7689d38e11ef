//! The stream rules of `tether.v1` (the proto's `Run` doc, `docs/protocol.md`):
//! a run refused at admission fails with a gRPC status and no `Finished`; an
//! admitted run ends with exactly one `Finished`, whatever the backend does;
//! the sidecar is unharmed.

use crate::support::*;
use std::time::Duration;
use tether_backend::pb::{self, backend_message, sidecar_client::SidecarClient as RawClient, sidecar_message};
use tether_sidecar::SidecarConfig;
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

/// Reads until `Finished`, which must come, then the end of the stream (OK).
/// Returns `Finished` and the output streamed before it.
async fn finished(inbound: &mut tonic::Streaming<pb::SidecarMessage>) -> (pb::Finished, Vec<u8>) {
    let mut streamed = Vec::new();
    loop {
        match inbound.message().await {
            Ok(Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::Finished(finished)) })) => {
                assert!(matches!(inbound.message().await, Ok(None)), "the stream ends with OK after `Finished`");
                return (finished, streamed);
            }
            Ok(Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::Output(output)) })) => {
                streamed.extend_from_slice(&output.data);
            }
            Ok(Some(_)) => {}
            other => panic!("the stream ended without `Finished`: {other:?}"),
        }
    }
}

/// Starts a run that waits on a call, then sends `bad`; the run must end with
/// `Finished` status PROTOCOL_ERROR saying `mentions`.
async fn assert_protocol_error_mid_run(bad: impl FnOnce(&str) -> pb::BackendMessage, mentions: &str) {
    let (sidecar, client) = sidecar().await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(start("call('anything')\n")).await.unwrap();
    let mut inbound = raw_client(sidecar.url()).await.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let call = match inbound.message().await.unwrap() {
        Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::ToolCall(call)) }) => call,
        other => panic!("expected a tool call, got {other:?}"),
    };
    tx.send(bad(&call.id)).await.unwrap();
    let (finished, _) = finished(&mut inbound).await;
    assert_eq!(finished.status(), pb::RunStatus::ProtocolError, "{finished:?}");
    let error = finished.error.unwrap();
    assert_eq!(error.kind, "protocol_error");
    assert!(error.message.contains(mentions), "{error:?}");
    let counters = &sidecar.sidecar;
    eventually(std::time::Duration::from_secs(5), "the run is gone", || counters.live_runs() == 0).await;
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_result_for_an_unknown_call_id_ends_the_run_with_a_protocol_error() {
    assert_protocol_error_mid_run(|id| tool_result(&format!("{id}-not-mine")), "not waiting for a result").await;
}

#[tokio::test]
async fn a_second_start_ends_the_run_with_a_protocol_error() {
    assert_protocol_error_mid_run(|_| start("1"), "only once").await;
}

#[tokio::test]
async fn a_result_over_the_message_size_limit_ends_the_run_clearly() {
    let oversized = "x".repeat(test_config().max_message_bytes() + 1);
    let bad = move |id: &str| pb::BackendMessage {
        kind: Some(backend_message::Kind::ToolResult(pb::ToolResult {
            id: id.into(),
            outcome: Some(pb::tool_result::Outcome::ValueJson(format!("\"{oversized}\""))),
        })),
    };
    assert_protocol_error_mid_run(bad, "reading the backend's stream failed").await;
}

#[tokio::test]
async fn a_duplicate_result_ends_the_run_with_a_protocol_error() {
    let (sidecar, _client) = sidecar().await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(start("call('a')\ncall('b')\n")).await.unwrap();
    let mut inbound = raw_client(sidecar.url()).await.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::ToolCall(first)) }) =
        inbound.message().await.unwrap()
    else {
        panic!("expected a tool call");
    };
    tx.send(tool_result(&first.id)).await.unwrap();
    tx.send(tool_result(&first.id)).await.unwrap();
    let (finished, _) = finished(&mut inbound).await;
    assert_eq!(finished.status(), pb::RunStatus::ProtocolError, "{finished:?}");
    assert!(finished.error.unwrap().message.contains(&first.id));
}

#[tokio::test]
async fn a_half_close_mid_call_cancels_the_run_with_finished() {
    let (sidecar, client) = sidecar().await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(start("call('anything')\n")).await.unwrap();
    let mut inbound = raw_client(sidecar.url()).await.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert!(matches!(
        inbound.message().await,
        Ok(Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::ToolCall(_)) }))
    ));
    drop(tx);
    let (finished, _) = finished(&mut inbound).await;
    assert_eq!(finished.status(), pb::RunStatus::Cancelled, "{finished:?}");
    assert!(finished.error.unwrap().message.contains("closed its side of the stream"));
    assert_still_works(&client).await;
}

/// A backend that stops reading its stream (its flow-control window full)
/// does not hold its run past the run's deadline: the sidecar ends the run
/// and frees its instance and waiting place all the same.
#[tokio::test]
async fn a_run_whose_stream_nobody_reads_still_ends_at_its_deadline() {
    // The default placement: the run is driven by its response stream.
    let (sidecar, client) = sidecar_with(SidecarConfig { worker_threads: 0, ..test_config() }).await;
    let channel = tonic::transport::Endpoint::from_shared(sidecar.url())
        .unwrap()
        .initial_stream_window_size(65_535)
        .connect()
        .await
        .unwrap();
    // Output streamed while the script computes, far more than the window.
    let mut message = start(
        "for i in range(16):\n    print('x' * 40000)\n    for j in range(200000):\n        pass\nwhile True:\n    pass\n",
    );
    if let Some(backend_message::Kind::Start(start)) = &mut message.kind {
        start.limits = Some(pb::Limits { deadline_ms: 1000, ..Default::default() });
    }
    let (tx, rx) = mpsc::channel(4);
    tx.send(message).await.unwrap();
    let unread = RawClient::new(channel).run(ReceiverStream::new(rx)).await.unwrap();
    let counters = &sidecar.sidecar;
    eventually(Duration::from_secs(10), "the run is admitted", || counters.live_runs() == 1).await;
    eventually(Duration::from_secs(10), "the run ends at its 1 s deadline", || counters.live_runs() == 0).await;
    assert_eq!(counters.waiting_runs(), 0);
    assert_eq!(counters.free_slots(), counters.config().slots);
    drop((unread, tx));
    assert_still_works(&client).await;
}

#[tokio::test]
async fn undecodable_bytes_at_start_are_invalid_argument() {
    let (sidecar, client) = sidecar().await;
    // A `Start` whose `run_id` is not UTF-8: protobuf `string` fields must be.
    let bytes: Vec<u8> = [&[0x0a_u8, 0x04, 0x22, 0x02, 0xff, 0xfe][..]].concat();
    let channel = tonic::transport::Endpoint::from_shared(sidecar.url()).unwrap().connect().await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/tether.v1.Sidecar/Run");
    let request = tonic::Request::new(tokio_stream::once(bytes::Bytes::from(bytes)));
    let status = grpc.streaming::<_, bytes::Bytes, bytes::Bytes, _>(request, path, RawBytes).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_still_works(&client).await;
}

/// A codec that sends and receives raw protobuf bytes.
#[derive(Debug, Clone, Copy, Default)]
struct RawBytes;

impl tonic::codec::Codec for RawBytes {
    type Encode = bytes::Bytes;
    type Decode = bytes::Bytes;
    type Encoder = RawBytes;
    type Decoder = RawBytes;
    fn encoder(&mut self) -> Self::Encoder {
        RawBytes
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawBytes
    }
}

impl tonic::codec::Encoder for RawBytes {
    type Item = bytes::Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: bytes::Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put(item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawBytes {
    type Item = bytes::Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<bytes::Bytes>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[tokio::test]
async fn output_is_streamed_while_the_script_runs_and_before_finished() {
    let (sidecar, _client) = sidecar().await;
    let (tx, rx) = mpsc::channel(4);
    // Prints a line every 100 ms for half a second, calling no tool.
    let ticking = "import time\nt = time.time()\nfor i in range(5):\n    print('tick', i)\n    while time.time() - t < 0.1 * (i + 1):\n        pass\n'done'";
    tx.send(start(ticking)).await.unwrap();
    let mut inbound = raw_client(sidecar.url()).await.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let mut chunks = Vec::new();
    let finished = loop {
        match inbound.message().await.unwrap() {
            Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::Output(output)) }) => chunks.push(output.data),
            Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::Finished(finished)) }) => break finished,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(finished.status(), pb::RunStatus::Ok, "{finished:?}");
    assert!(chunks.len() >= 2, "output arrives while the script runs, not only at the end: {chunks:?}");
    assert_eq!(chunks.concat(), finished.stdout, "every byte streamed once; `Finished` repeats all of it");
    assert_eq!(finished.limits.unwrap().max_calls, test_config().limits.max_calls);
}

#[tokio::test]
async fn a_script_result_too_large_to_send_is_a_size_limit() {
    let (sidecar, client) = sidecar().await;
    let limit = test_config().limits.script_result_bytes;
    let (outcome, _) = run_demo(&client, &format!("'x' * {}", limit + 1)).await;
    assert_eq!(outcome.status, pb::RunStatus::LimitExceeded, "{outcome:?}");
    let error = outcome.error.unwrap();
    assert_eq!((error.kind.as_str(), error.limit.as_str()), ("size_limit", "max_script_result_bytes"));
    drop(sidecar);
}

#[tokio::test]
async fn a_run_going_when_the_sidecar_shuts_down_ends_with_finished_cancelled() {
    let (sidecar, _client) = sidecar().await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(start("call('anything')\n")).await.unwrap();
    let mut inbound = raw_client(sidecar.url()).await.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert!(matches!(
        inbound.message().await,
        Ok(Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::ToolCall(_)) }))
    ));
    let stopping = tokio::spawn(async move { sidecar.sidecar.shutdown().await });
    let (finished, _) = finished(&mut inbound).await;
    assert_eq!(finished.status(), pb::RunStatus::Cancelled);
    assert_eq!(finished.error.unwrap().message, "sidecar shutting down");
    stopping.await.unwrap();
    drop(tx);
}
