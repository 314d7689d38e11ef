//! Parked states (`docs/parking.md`): the bytes of `Start.resume.state`
//! come from outside. Any bytes are refused by the sidecar's seal check with
//! a clear reason, never a panic; a genuine state resumes only its own run,
//! and every cut or changed byte of it is refused. Inside the sandbox, the
//! Python runtime's frame reader refuses any bytes that are not its own
//! frame, naming what is wrong, never panicking.

use arbitrary::Arbitrary;
use tether_python::park::frame;
use tether_sidecar::ParkKey;
use tether_sidecar::fuzzing::{seal, unseal};

/// One input: bytes offered as a state, and a change to a genuine one.
#[derive(Debug, Arbitrary)]
pub struct Input {
    /// Offered as `Start.resume.state` as they are.
    pub state: Vec<u8>,
    /// The guest state a genuine seal carries.
    pub guest_state: Vec<u8>,
    /// Where a genuine state is changed, and with what (`xor` 0: cut there).
    pub at: u16,
    /// What the byte at `at` is xor-ed with; 0 cuts the state at `at`.
    pub xor: u8,
}

const BUILD: [u8; 32] = [7; 32];

/// Checks one input.
pub fn check(data: &[u8]) {
    let Some(input) = crate::decode::<Input>(data) else { return };
    let key = ParkKey::from_secret(&[3; 32]).unwrap();
    let refused =
        unseal(&key, &input.state, &BUILD, "turn", "run").expect_err("a state no sidecar sealed resumes nothing");
    assert!(refused.starts_with("parked_state_invalid") || refused.starts_with("parked_by_other_build"), "{refused}");

    let genuine = seal(&key, &input.guest_state, &BUILD, "turn", "run");
    assert_eq!(unseal(&key, &genuine, &BUILD, "turn", "run").unwrap(), input.guest_state);
    assert!(unseal(&key, &genuine, &BUILD, "turn", "other run").is_err(), "bound to its run");
    assert!(unseal(&key, &genuine, &[8; 32], "turn", "run").is_err(), "bound to its guest build");
    let at = usize::from(input.at) % genuine.len();
    let mut changed = genuine.clone();
    if input.xor == 0 {
        changed.truncate(at);
    } else {
        changed[at] ^= input.xor;
    }
    assert!(unseal(&key, &changed, &BUILD, "turn", "run").is_err(), "a state changed at byte {at} is refused");

    // The runtime's own frame, for the bytes the sidecar hands the guest.
    let fingerprint = frame::fingerprint("x = call('a')");
    if let Err(error) = frame::open(&input.state, fingerprint) {
        assert!(!error.to_string().is_empty());
    }
    if let Some(framed) = frame::seal(fingerprint, b"{}", &input.guest_state) {
        let (runner, dump) = frame::open(&framed, fingerprint).unwrap();
        assert_eq!((runner, dump), (&b"{}"[..], &input.guest_state[..]));
        let mut changed = framed.clone();
        let at = usize::from(input.at) % framed.len();
        if input.xor == 0 {
            changed.truncate(at);
        } else {
            changed[at] ^= input.xor;
        }
        assert!(frame::open(&changed, fingerprint).is_err(), "a frame changed at byte {at} is refused");
    }
}
