//! The sidecar between a guest and its backend: the guest's request
//! documents (`tether_v1.call`, as bytes) and the backend's messages on the
//! Run stream (results for ids never issued or already answered, results
//! with no outcome, oversized, unreadable or too deep values, `Cancel`, a
//! second `Start`, empty messages, stream errors, raw protobuf), through the
//! sidecar's own call path and inbound reader.
//!
//! Checked against a model of the contract (`docs/protocol.md`,
//! `docs/results.md`): the messages the sidecar sends for each call (a
//! `ToolCall`, or a `CallRefused` with the right code), the run's end (the
//! first message that breaks the rules ends it, as a protocol error; `Cancel`
//! cancels it; a lost stream ends it), and — when the guest gets its answer —
//! a response document the guest reads back to exactly one result per call,
//! each the value the backend sent or the failure the contract names.

use crate::json::Json;
use arbitrary::Arbitrary;
use prost::Message;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tether_codes::Reason;
use tether_guest::wire::{self, CallBatch, CallRequest, CallResult, CallResults, Failure};
use tether_proto::pb::{self, backend_message, sidecar_message, tool_result};
use tether_sidecar::fuzzing::{CallPath, InboundEnd, Limits};
use tonic::{Code, Status};

const PARENT: &str = "call_7";
/// `sidecar/src/calls.rs`: the longest tool name the sidecar forwards.
const MAX_TOOL_NAME_BYTES: usize = 256;

#[derive(Arbitrary, Debug)]
struct Input {
    max_calls: u8,
    args_bytes: u16,
    result_bytes: u16,
    batches: Vec<Batch>,
    /// What the backend does on each `ToolCall` it reads, in order; silence
    /// once these run out.
    answers: Vec<Answer>,
}

#[derive(Arbitrary, Debug)]
enum Batch {
    /// A well-formed request document.
    Calls(Vec<Call>),
    /// Whatever bytes the guest wrote.
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Call {
    name: Name,
    args: Json,
}

#[derive(Arbitrary, Debug)]
enum Name {
    Tool,
    Any(String),
    Long(u16),
}

#[derive(Arbitrary, Debug)]
enum Answer {
    Value(Json),
    /// Any text as `value_json`: not JSON, too big, or JSON.
    Text(String),
    Failure(String, String),
    NoOutcome,
    /// The right answer, then the same answer again.
    Twice(Json),
    /// A result for an id the backend made up.
    OtherId(String, Json),
    Silence,
    Cancel(String),
    Start,
    Empty,
    StreamError(i32),
    /// A message as the bytes on the wire.
    Raw(Vec<u8>),
}

/// What the backend pushed onto the stream, in order.
type Pushed = Vec<Result<pb::BackendMessage, Status>>;

/// One message the backend pushed, with how many `ToolCall`s it had read then.
struct Push {
    item: Result<pb::BackendMessage, Status>,
    calls_read: usize,
}

/// Checks one input: `data` decoded as libFuzzer decodes it for this target
/// (`crate::decode`); bytes that decode to no input are skipped.
pub fn check(data: &[u8]) {
    let Some(input) = crate::decode::<Input>(data) else { return };
    let limits = Limits {
        parent_call_id: PARENT.to_owned(),
        max_calls: u32::from(input.max_calls % 12),
        args_bytes: u64::from(input.args_bytes),
        result_bytes: u64::from(input.result_bytes),
    };
    let requests: Vec<Vec<u8>> = input.batches.iter().map(request).collect();
    let observed = exchange(limits.clone(), &requests, input.answers);
    against_contract(&limits, &requests, &observed);
}

fn request(batch: &Batch) -> Vec<u8> {
    match batch {
        Batch::Raw(bytes) => bytes.clone(),
        Batch::Calls(calls) => {
            let calls = calls
                .iter()
                .map(|call| CallRequest {
                    name: match &call.name {
                        Name::Tool => "lookup".to_owned(),
                        Name::Any(name) => name.clone(),
                        Name::Long(len) => "n".repeat(usize::from(*len) % 600),
                    },
                    args: call.args.0.clone(),
                })
                .collect();
            serde_json::to_vec(&CallBatch { calls }).unwrap()
        }
    }
}

/// What one fuzzed run did.
struct Observed {
    /// `Ok(end)` when the inbound reader ended the run; `Err(documents)` when
    /// the guest finished first, with what each `call` returned.
    end: Result<InboundEnd, Vec<Result<Vec<u8>, String>>>,
    /// Every message the sidecar sent.
    sent: Vec<sidecar_message::Kind>,
    /// Every message the backend pushed, in the order the sidecar reads them.
    pushed: Vec<Push>,
    /// The ids of the `ToolCall`s the backend read, in order.
    calls_read: Vec<String>,
}

/// Runs the guest's batches against a backend that answers as `answers` say,
/// the way `RunTask::drive` runs them: the guest and the inbound reader race,
/// and whichever ends first ends the run.
fn exchange(limits: Limits, requests: &[Vec<u8>], answers: Vec<Answer>) -> Observed {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(async {
        let (outbound, mut sent_rx) = tokio::sync::mpsc::channel(64);
        let mut path = CallPath::new(limits, outbound).await;
        let (push, inbound) = futures::channel::mpsc::unbounded();
        let reader = path.read_inbound(inbound);
        let guest = async {
            let mut documents = Vec::new();
            for request in requests {
                let document = path.call(request).await;
                let failed = document.is_err();
                documents.push(document);
                if failed {
                    break;
                }
            }
            documents
        };
        let run = async {
            tokio::select! {
                biased;
                documents = guest => Err(documents),
                end = reader => Ok(end),
            }
        };
        let backend = async {
            let mut sent = Vec::new();
            let mut pushed = Vec::new();
            let mut calls_read = Vec::new();
            let mut answers = answers.into_iter();
            // The clock is paused: this timeout fires only when the sidecar is
            // idle, waiting on the backend.
            while let Ok(Some(message)) = tokio::time::timeout(Duration::from_secs(60), sent_rx.recv()).await {
                let message = message.unwrap().kind.unwrap();
                if let sidecar_message::Kind::ToolCall(call) = &message {
                    calls_read.push(call.id.clone());
                    for item in respond(&call.id, answers.next().unwrap_or(Answer::Silence)) {
                        pushed.push(Push { item: clone_item(&item), calls_read: calls_read.len() });
                        push.unbounded_send(item).unwrap();
                    }
                }
                sent.push(message);
            }
            // Nothing more to answer: the backend half-closes its stream.
            push.close_channel();
            (sent, pushed, calls_read)
        };
        let (end, (sent, pushed, calls_read)) = tokio::join!(run, backend);
        Observed { end, sent, pushed, calls_read }
    })
}

fn respond(id: &str, answer: Answer) -> Pushed {
    let result = |id: &str, outcome| pb::ToolResult { id: id.to_owned(), outcome };
    let message = |kind| Ok(pb::BackendMessage { kind: Some(kind) });
    let value = |json: Json| Some(tool_result::Outcome::ValueJson(json.0.to_string()));
    match answer {
        Answer::Value(json) => vec![message(backend_message::Kind::ToolResult(result(id, value(json))))],
        Answer::Text(text) => {
            vec![message(backend_message::Kind::ToolResult(result(id, Some(tool_result::Outcome::ValueJson(text)))))]
        }
        Answer::Failure(code, message_text) => {
            let failure = pb::Failure { code, message: message_text };
            vec![message(backend_message::Kind::ToolResult(result(id, Some(tool_result::Outcome::Failure(failure)))))]
        }
        Answer::NoOutcome => vec![message(backend_message::Kind::ToolResult(result(id, None)))],
        Answer::Twice(json) => {
            let answer = backend_message::Kind::ToolResult(result(id, value(json)));
            vec![message(answer.clone()), message(answer)]
        }
        Answer::OtherId(other, json) => vec![message(backend_message::Kind::ToolResult(result(&other, value(json))))],
        Answer::Silence => vec![],
        Answer::Cancel(reason) => {
            vec![message(backend_message::Kind::Cancel(pb::Cancel { reason }))]
        }
        Answer::Start => vec![message(backend_message::Kind::Start(pb::Start::default()))],
        Answer::Empty => vec![Ok(pb::BackendMessage { kind: None })],
        Answer::StreamError(code) => vec![Err(Status::new(Code::from(code), "stream error"))],
        // As tonic hands the run a message it decoded; one it cannot decode
        // fails the stream with `Internal`.
        Answer::Raw(bytes) => {
            vec![pb::BackendMessage::decode(bytes.as_slice()).map_err(|e| Status::internal(e.to_string()))]
        }
    }
}

fn clone_item(item: &Result<pb::BackendMessage, Status>) -> Result<pb::BackendMessage, Status> {
    match item {
        Ok(message) => Ok(message.clone()),
        Err(status) => Err(Status::new(status.code(), status.message())),
    }
}

/// The run as the contract has it, from the same inputs.
#[derive(Default)]
struct Model {
    /// The sidecar's messages for every batch the guest sent, in order.
    sent: Vec<sidecar_message::Kind>,
    /// Per batch: each call's id if forwarded, or the failure it was refused with.
    batches: Vec<Vec<Result<(String, String), Failure>>>,
}

fn model(limits: &Limits, requests: &[Vec<u8>]) -> Model {
    let mut model = Model::default();
    let mut made = 0u32;
    let mut cap_reported = false;
    for (index, request) in requests.iter().enumerate() {
        let Ok(batch) = serde_json::from_slice::<CallBatch>(request) else { break };
        let number = index as u32 + 1;
        let mut verdicts = Vec::new();
        for call in &batch.calls {
            made += 1;
            let id = format!("{PARENT}/{made}");
            let args_json = call.args.to_string();
            let refusal = if made > limits.max_calls {
                let report = !cap_reported;
                cap_reported = true;
                Some((Reason::ScriptCallCap { max: limits.max_calls }, report))
            } else if call.name.len() > MAX_TOOL_NAME_BYTES {
                Some((Reason::ToolNameTooLong { length: call.name.len(), max: MAX_TOOL_NAME_BYTES }, true))
            } else if !call.args.is_object() {
                Some((Reason::ArgumentsNotObject, true))
            } else if args_json.len() as u64 > limits.args_bytes {
                Some((Reason::ArgumentsTooLarge { size: args_json.len() as u64, limit: limits.args_bytes }, true))
            } else {
                None
            };
            verdicts.push(match refusal {
                Some((reason, report)) => (Err(Failure::from(&reason)), report.then_some(id)),
                None => (Ok((id, call.name.clone())), None),
            });
        }
        let forwarded = verdicts.iter().filter(|(v, _)| v.is_ok()).count() as u32;
        for (call, (verdict, reported)) in batch.calls.iter().zip(&verdicts) {
            match (verdict, reported) {
                (Ok((id, name)), _) => model.sent.push(sidecar_message::Kind::ToolCall(pb::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    args_json: call.args.to_string(),
                    batch: number,
                    batch_size: forwarded,
                    max_result_bytes: limits.result_bytes,
                    ..Default::default()
                })),
                (Err(failure), Some(id)) => model.sent.push(sidecar_message::Kind::CallRefused(pb::CallRefused {
                    id: id.clone(),
                    failure: Some(pb::Failure { code: failure.code.clone(), message: failure.message.clone() }),
                    batch: number,
                    ..Default::default()
                })),
                (Err(_), None) => {}
            }
        }
        model.batches.push(verdicts.into_iter().map(|(verdict, _)| verdict).collect());
    }
    model
}

/// The stream rules over what the backend pushed: the results delivered
/// (by id) and how the reader ends. `None` when an id the backend made up
/// names a call issued but not yet read, so timing decides its fate.
fn inbound_model(
    pushed: &[Push],
    calls_read: &[String],
    issued: &HashSet<String>,
) -> Option<(HashMap<String, pb::ToolResult>, InboundEnd)> {
    let mut delivered = HashMap::new();
    for Push { item, calls_read: reads } in pushed {
        let message = match item {
            Ok(message) => message,
            Err(status) if matches!(status.code(), Code::Cancelled | Code::Unknown | Code::Unavailable) => {
                return Some((delivered, InboundEnd::Gone));
            }
            Err(_) => return Some((delivered, InboundEnd::Broke(String::new()))),
        };
        match &message.kind {
            Some(backend_message::Kind::ToolResult(result)) => {
                if result.outcome.is_none() {
                    return Some((delivered, InboundEnd::Broke(String::new())));
                }
                // An id is pending from before its `ToolCall` is sent until
                // its first answer.
                let read = calls_read[..*reads].contains(&result.id);
                if !read && issued.contains(&result.id) {
                    return None;
                }
                if !read || delivered.contains_key(&result.id) {
                    return Some((delivered, InboundEnd::Broke(String::new())));
                }
                delivered.insert(result.id.clone(), result.clone());
            }
            Some(backend_message::Kind::Cancel(cancel)) => {
                return Some((delivered, InboundEnd::Cancelled(Some(cancel.reason.clone()))));
            }
            // Marks a call still waiting; any other id breaks the rules.
            Some(backend_message::Kind::AwaitingPerson(awaiting)) => {
                let read = calls_read[..*reads].contains(&awaiting.id);
                if !read && issued.contains(&awaiting.id) {
                    return None;
                }
                if !read || delivered.contains_key(&awaiting.id) {
                    return Some((delivered, InboundEnd::Broke(String::new())));
                }
            }
            Some(backend_message::Kind::Start(_)) | None => return Some((delivered, InboundEnd::Broke(String::new()))),
        }
    }
    Some((delivered, InboundEnd::Cancelled(None)))
}

/// What the guest must get for a forwarded call the backend answered.
fn expected_result(tool: &str, result: &pb::ToolResult, limit: u64) -> Result<CallResult, &'static str> {
    match &result.outcome {
        Some(tool_result::Outcome::ValueJson(json)) if json.len() as u64 > limit => {
            let reason = Reason::ResultTooLarge { tool: tool.to_owned(), size: json.len() as u64, limit };
            Ok(CallResult::Err(Failure::from(&reason)))
        }
        Some(tool_result::Outcome::ValueJson(json)) => match serde_json::from_str::<Value>(json) {
            Ok(value) if wire::depth(&value) <= wire::MAX_DEPTH => Ok(CallResult::Ok(value)),
            // The message carries serde_json's own words: the code is the contract.
            _ => Err("invalid_result"),
        },
        Some(tool_result::Outcome::Failure(f)) => {
            Ok(CallResult::Err(Failure { code: f.code.clone(), message: f.message.clone() }))
        }
        None => Err("invalid_result"),
    }
}

fn against_contract(limits: &Limits, requests: &[Vec<u8>], observed: &Observed) {
    let model = model(limits, requests);
    let sent = strip(&observed.sent);
    assert!(
        model.sent.len() >= sent.len() && model.sent[..sent.len()] == sent[..],
        "the sidecar's messages differ from the contract's:\n sent {sent:#?}\n want {:#?}",
        model.sent
    );
    let issued: HashSet<String> =
        model.batches.iter().flatten().filter_map(|v| v.as_ref().ok().map(|(id, _)| id.clone())).collect();
    let Some((delivered, end)) = inbound_model(&observed.pushed, &observed.calls_read, &issued) else { return };

    match &observed.end {
        Ok(observed_end) => match (observed_end, &end) {
            (InboundEnd::Broke(what), InboundEnd::Broke(_)) => assert!(!what.is_empty()),
            (got, want) => assert_eq!(got, want, "the run ended otherwise than the stream rules say"),
        },
        Err(documents) => {
            assert_eq!(sent, model.sent, "the guest finished, so every call was sent or reported");
            for (index, document) in documents.iter().enumerate() {
                let Ok(batch) = serde_json::from_slice::<CallBatch>(&requests[index]) else {
                    let error = document.as_ref().unwrap_err();
                    assert!(error.starts_with("guest fault: `tether_v1.call` got an unreadable batch"), "{error}");
                    assert_eq!(index + 1, documents.len(), "an unreadable batch ends the run");
                    continue;
                };
                let document = document.as_ref().unwrap();
                // The host stages one result per call, and the guest reads
                // back exactly what the host meant.
                let staged: CallResults = serde_json::from_slice(document).unwrap();
                assert_eq!(staged.results.len(), batch.calls.len());
                let read = wire::read_results(document, batch.calls.len());
                assert_eq!(read, staged.results, "the guest reads the document as the host wrote it");
                for (got, verdict) in read.iter().zip(&model.batches[index]) {
                    match verdict {
                        Err(failure) => assert_eq!(got, &CallResult::Err(failure.clone())),
                        Ok((id, tool)) => {
                            let answer = delivered.get(id).expect("the guest went on, so its call was answered");
                            match expected_result(tool, answer, limits.result_bytes) {
                                Ok(want) => assert_eq!(got, &want),
                                Err(code) => assert!(matches!(got, CallResult::Err(f) if f.code == code), "{got:?}"),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The sent messages without what the model does not predict: trace
/// context, and refused calls' names and arguments (cut copies).
fn strip(sent: &[sidecar_message::Kind]) -> Vec<sidecar_message::Kind> {
    sent.iter()
        .map(|message| match message {
            sidecar_message::Kind::ToolCall(call) => {
                sidecar_message::Kind::ToolCall(pb::ToolCall { trace_context: Default::default(), ..call.clone() })
            }
            sidecar_message::Kind::CallRefused(refused) => sidecar_message::Kind::CallRefused(pb::CallRefused {
                id: refused.id.clone(),
                failure: refused.failure.clone(),
                batch: refused.batch,
                ..Default::default()
            }),
            other => other.clone(),
        })
        .collect()
}
