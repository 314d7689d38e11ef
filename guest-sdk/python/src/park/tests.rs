//! The parked-state format: what it writes reads back, and every way a
//! state can be wrong is an [`InvalidState`], not a panic.

use monty::{MontyRepl, MontyRun};
use monty_types::{CompileOptions, MontyObject, PrintWriter, ResourceLimits, ResourceTracker};
use serde_json::json;

use super::*;

const SOURCE: &str = "x = call('a')\nx";

/// A run of [`SOURCE`] suspended at its call.
fn suspended_run() -> RunProgress {
    let run = MontyRun::new(SOURCE.into(), SCRIPT_NAME, vec!["call".into()], CompileOptions::default())
        .unwrap_or_else(|error| panic!("{error}"));
    let tracker = ResourceTracker::new(ResourceLimits::default());
    match run.start(vec![MontyObject::function("call", None)], tracker, PrintWriter::Disabled) {
        Ok(progress @ RunProgress::FunctionCall(_)) => progress,
        other => panic!("expected a call, got {other:?}"),
    }
}

fn park(progress: &RunProgress, waiting: &Waiting, max_bytes: u64) -> Option<Vec<u8>> {
    let unsent_calls = BTreeMap::from([(9, CallRequest { name: "later".into(), args: json!({"n": 1}) })]);
    let sleeps = BTreeMap::from([(4, Instant::now() + Duration::from_secs(60))]);
    let sleep = SleepBudget::resumed(Duration::from_secs(10), Duration::from_secs(3));
    let suspended =
        Suspended { source: SOURCE, progress, waiting, unsent_calls: &unsent_calls, sleeps: &sleeps, sleep: &sleep };
    suspended.park(max_bytes)
}

/// The parts of `state`, as `frame::open` gives them.
fn parts(state: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (runner, dump) = frame::open(state, frame::fingerprint(SOURCE)).unwrap_or_else(|error| panic!("{error}"));
    (runner.to_vec(), dump.to_vec())
}

fn reseal(runner: &[u8], dump: &[u8]) -> Vec<u8> {
    frame::seal(frame::fingerprint(SOURCE), runner, dump).unwrap_or_default()
}

#[test]
fn a_parked_state_reads_back_as_it_was() {
    let state = park(&suspended_run(), &Waiting::Call, u64::MAX).unwrap_or_default();
    let parked = read(&state, SOURCE).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(parked.waiting, Waiting::Call);
    assert!(matches!(&parked.progress, RunProgress::FunctionCall(call) if call.function_name == "call"));
    assert_eq!(parked.unsent_calls[&9], CallRequest { name: "later".into(), args: json!({"n": 1}) });
    let left = parked.sleeps[&4];
    assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(59), "{left:?}");
    assert_eq!((parked.sleep.total(), parked.sleep.left()), (Duration::from_secs(10), Duration::from_secs(3)));
}

#[test]
fn a_state_larger_than_the_host_takes_is_none() {
    let progress = suspended_run();
    let size = park(&progress, &Waiting::Call, u64::MAX).map_or(0, |state| state.len() as u64);
    assert!(size > frame::HEADER_BYTES as u64);
    assert_eq!(park(&progress, &Waiting::Call, size).map(|state| state.len() as u64), Some(size));
    assert_eq!(park(&progress, &Waiting::Call, size - 1), None);
}

#[test]
fn frames_say_what_is_wrong_with_them() {
    let fingerprint = frame::fingerprint(SOURCE);
    let state = reseal(b"{}", b"dump");
    assert_eq!(frame::open(&state, fingerprint), Ok((&b"{}"[..], &b"dump"[..])));
    assert_eq!(frame::open(&[], fingerprint), Err(FrameError::Empty));
    assert_eq!(frame::open(b"TPYPA", fingerprint), Err(FrameError::Damaged), "cut inside the magic");
    assert_eq!(frame::open(b"PNG\r\n", fingerprint), Err(FrameError::NotOurs));
    for cut in 8..state.len() {
        assert_eq!(frame::open(&state[..cut], fingerprint), Err(FrameError::Damaged), "cut at {cut}");
    }
    let mut other = state.clone();
    other[8] = 7;
    assert_eq!(frame::open(&other, fingerprint), Err(FrameError::OtherFormat(7)));
    assert_eq!(frame::open(&state, frame::fingerprint("another script")), Err(FrameError::OtherScript));
}

#[test]
fn a_sound_frame_around_a_bad_part_is_invalid() {
    let progress = suspended_run();
    let state = park(&progress, &Waiting::Call, u64::MAX).unwrap_or_default();
    let (runner, dump) = parts(&state);

    let not_json = reseal(b"{not json", &dump);
    assert!(matches!(read(&not_json, SOURCE), Err(InvalidState::RunnerPart(_))));
    let not_monty = reseal(&runner, b"garbage");
    assert_eq!(read(&not_monty, SOURCE).err(), Some(InvalidState::Dump(DumpError::NotADump)));
    let mut newer = dump.clone();
    newer[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(matches!(read(&reseal(&runner, &newer), SOURCE), Err(InvalidState::Dump(DumpError::VersionTooNew { .. }))));
    let cut = reseal(&runner, &dump[..dump.len() - 3]);
    assert!(matches!(read(&cut, SOURCE), Err(InvalidState::Dump(DumpError::Payload(_)))));

    // The runner's part and monty's dump must agree on where the run waits.
    let futures = park(&progress, &Waiting::Futures { batch: vec![1] }, u64::MAX).unwrap_or_default();
    assert_eq!(read(&futures, SOURCE).err(), Some(InvalidState::Mismatch));

    // A REPL session is not a parked run.
    let repl = MontyRepl::new(SCRIPT_NAME, ResourceTracker::new(ResourceLimits::default()), CompileOptions::default());
    let idle = monty::dump(SCRIPT_NAME, None, &[], SessionRef::Idle(&repl)).unwrap_or_default();
    assert_eq!(read(&reseal(&runner, &idle), SOURCE).err(), Some(InvalidState::NotARun));
}

#[test]
fn an_invalid_state_is_a_parked_state_invalid_error_that_says_what_to_do() {
    let error = ScriptError::from(InvalidState::Frame(FrameError::Damaged));
    assert_eq!(error.kind, "parked_state_invalid");
    assert_eq!(
        error.message,
        "the parked state is truncated or damaged (its checksum does not match). \
         The run cannot go on from it: start the script again"
    );
}
