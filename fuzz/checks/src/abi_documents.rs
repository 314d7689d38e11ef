//! The `tether_v1` documents as the guest SDK reads them (`guest-sdk/src/wire.rs`).
//!
//! - Any bytes as the response to a batch of `count` calls: the guest gets
//!   exactly `count` results — what the document holds, `missing_result` for
//!   calls it lacks, `invalid_result` for all when it is unreadable — and
//!   never panics or traps.
//! - Well-formed results: the guest reads back exactly what was written.
//! - Any bytes as a request, outcome or start document: one that reads,
//!   written again, reads back equal (the hand-written `ok`/`error` forms
//!   of `CallResult` and `Outcome` agree with themselves).

use crate::json::Json;
use arbitrary::Arbitrary;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use tether_codes::Reason;
use tether_guest::wire::{self, CallBatch, CallResult, CallResults, Failure, Outcome, ScriptError, StartDoc};

#[derive(Arbitrary, Debug)]
enum Input {
    Response { document: Vec<u8>, count: u8 },
    Results { results: Vec<Result<Json, (String, String)>>, count: u8 },
    Document(Vec<u8>),
    Outcome(Result<Json, (String, String, u32)>),
}

/// Checks one input: `data` decoded as libFuzzer decodes it for this target
/// (`crate::decode`); bytes that decode to no input are skipped.
pub fn check(data: &[u8]) {
    let Some(input) = crate::decode::<Input>(data) else { return };
    match input {
        Input::Response { document, count } => response(&document, usize::from(count)),
        Input::Results { results, count } => {
            let results: Vec<CallResult> = results
                .into_iter()
                .map(|r| match r {
                    Ok(json) => CallResult::Ok(json.0),
                    Err((code, message)) => CallResult::Err(Failure { code, message }),
                })
                .collect();
            let document = serde_json::to_vec(&CallResults { results: results.clone() }).unwrap();
            let count = usize::from(count);
            let read = wire::read_results(&document, count);
            assert_eq!(read.len(), count);
            let shallow = results.iter().all(|r| !matches!(r, CallResult::Ok(v) if wire::depth(v) > wire::MAX_DEPTH));
            if shallow {
                // Every value the host hands over is at most `MAX_DEPTH` deep: the guest reads it all.
                let shared = count.min(results.len());
                assert_eq!(read[..shared], results[..shared]);
            }
            response(&document, count);
        }
        Input::Document(bytes) => {
            round_trip::<CallBatch>(&bytes);
            round_trip::<CallResults>(&bytes);
            round_trip::<Outcome>(&bytes);
            round_trip::<StartDoc>(&bytes);
        }
        Input::Outcome(outcome) => {
            let outcome = match outcome {
                Ok(json) => Outcome::Ok(json.0),
                Err((kind, message, line)) => {
                    Outcome::Err(ScriptError { kind, message, line, ..ScriptError::default() })
                }
            };
            let bytes = serde_json::to_vec(&outcome).unwrap();
            if let Ok(read) = serde_json::from_slice::<Outcome>(&bytes) {
                assert_eq!(read, outcome);
            }
        }
    }
}

/// The guest's reading of `document` against the contract.
fn response(document: &[u8], count: usize) {
    let read = wire::read_results(document, count);
    assert_eq!(read.len(), count, "one result per call, whatever the host sent");
    match serde_json::from_slice::<CallResults>(document) {
        Ok(staged) => {
            for (index, result) in read.iter().enumerate() {
                match staged.results.get(index) {
                    Some(sent) => assert_eq!(result, sent),
                    None => assert_eq!(result, &CallResult::Err(Failure::from(&Reason::MissingResult))),
                }
            }
        }
        Err(_) => {
            for result in &read {
                assert!(matches!(result, CallResult::Err(f) if f.code == "invalid_result"), "{result:?}");
            }
        }
    }
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(bytes: &[u8]) {
    if let Ok(document) = serde_json::from_slice::<T>(bytes) {
        let again = serde_json::to_vec(&document).unwrap();
        let read: T = serde_json::from_slice(&again).unwrap();
        assert_eq!(read, document);
    }
}
