//! Parked runs: the sealed state a run hands its backend when it parks
//! (`Parked.state`), and the checks it passes before a run resumes from it
//! (`Start.resume`). The lifecycle is in `docs/parking.md`.
//!
//! The sidecar keeps nothing of a parked run: everything the run had —
//! the guest's own suspended state, calls made and refused, CPU time, the
//! live wall time, output, peak memory, the batch it waits on with the
//! results that had arrived — travels in [`Carried`], and the backend owns
//! it. So the bytes come back from outside: they are sealed with an
//! HMAC-SHA256 under the sidecar's [`ParkKey`] (shared by every sidecar of
//! a deployment), bound to their turn, run and guest build, and checked
//! before anything of them is used. The guest's part is loaded only inside
//! the sandbox.

use hmac::{Hmac, KeyInit, Mac};
use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress_to_output, create_comp_flags_from_zip_params,
};
use prost::Message;
use std::cell::RefCell;
use tether_codes::RunErrorKind;
use tether_proto::pb;

/// Prefix of every sealed state.
const MAGIC: &[u8; 6] = b"TPARK\0";

/// The version of [`Carried`]'s meaning. A state of another version is
/// refused (`parked_by_other_build`): a sidecar reads only its own.
const FORMAT: u8 = 1;

/// Bytes of the seal (HMAC-SHA256).
const TAG_BYTES: usize = 32;

/// Bytes before the sealed body: magic, format, tag.
const HEADER_BYTES: usize = MAGIC.len() + 1 + TAG_BYTES;

/// The most bytes a sealed body inflates to. The seal is checked first, so
/// only bodies a sidecar with the key deflated are inflated; this bounds a
/// bug, not an attacker.
const MAX_BODY_BYTES: usize = 64 << 20;

type Seal = Hmac<sha2_hmac::Sha256>;

mod key_file;
pub use key_file::{ParkKeyFileError, default_park_key_file};

/// The key that seals parked states. Every sidecar that may resume another's
/// parked runs needs the same key (`--park-key-file`); one made at random
/// ([`ParkKey::random`], the default) seals states only this process can
/// resume.
#[derive(Clone)]
pub struct ParkKey([u8; 32]);

impl std::fmt::Debug for ParkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ParkKey(<redacted>)")
    }
}

/// Too little key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a park key needs at least 32 bytes of secret material, `{0}` were given; write 32 random bytes to the key file (e.g. `head -c 32 /dev/urandom`)"
)]
pub struct ShortParkKey(pub usize);

impl ParkKey {
    /// A key derived from `secret` (SHA-256 of it), which must hold at
    /// least 32 bytes: e.g. a key file's contents.
    ///
    /// # Errors
    /// [`ShortParkKey`] for fewer than 32 bytes.
    pub fn from_secret(secret: &[u8]) -> Result<ParkKey, ShortParkKey> {
        use sha2::Digest;
        if secret.len() < 32 {
            return Err(ShortParkKey(secret.len()));
        }
        Ok(ParkKey(sha2::Sha256::digest(secret).into()))
    }

    /// A key made at random: states it seals resume only in this process.
    ///
    /// # Errors
    /// If the operating system's random number generator fails.
    pub fn random() -> std::io::Result<ParkKey> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(std::io::Error::from)?;
        Ok(ParkKey(key))
    }

    fn seal(&self) -> Seal {
        // HMAC takes a key of any length.
        #[allow(clippy::expect_used, reason = "HMAC accepts keys of every length")]
        <Seal as KeyInit>::new_from_slice(&self.0).expect("HMAC takes any key length")
    }
}

/// One call of the batch a parked run waits on.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct BatchCall {
    /// The call's id; empty for a call the sidecar refused (it has its answer).
    #[prost(string, tag = "1")]
    pub(crate) id: String,
    /// The tool the script named.
    #[prost(string, tag = "2")]
    pub(crate) name: String,
    /// The call's answer as the guest will get it (`tether_guest::CallResult`
    /// JSON), once known: refused, or answered before the run parked.
    #[prost(string, optional, tag = "3")]
    pub(crate) answer_json: Option<String>,
}

/// What a run's call port carries across a park (into [`Carried`]).
#[derive(Debug)]
pub(crate) struct PortSnapshot {
    /// Calls the script made, refused ones included.
    pub(crate) calls_made: u32,
    /// Batches the script sent.
    pub(crate) batches: u32,
    /// The cap's breach was reported.
    pub(crate) cap_reported: bool,
    /// The batch waited on.
    pub(crate) batch: Vec<BatchCall>,
}

/// A guest that parked: its own state and what its calls carry.
#[derive(Debug)]
pub(crate) struct ParkedGuest {
    /// The guest's state, opaque to the host.
    pub(crate) guest_state: Vec<u8>,
    /// The port's counters and the batch waited on.
    pub(crate) port: PortSnapshot,
    /// When the host asked the guest to park.
    pub(crate) asked: std::time::Instant,
}

/// Everything a parked run had, besides what the backend keeps itself.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Carried {
    /// SHA-256 of the guest module that parked.
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) guest_build: Vec<u8>,
    /// The runtime's name (`Start.language`).
    #[prost(string, tag = "2")]
    pub(crate) language: String,
    /// The turn that owns the run.
    #[prost(string, tag = "3")]
    pub(crate) turn_id: String,
    /// The backend's run id.
    #[prost(string, tag = "4")]
    pub(crate) run_id: String,
    /// The call that started the script.
    #[prost(string, tag = "5")]
    pub(crate) parent_call_id: String,
    /// The limits the run ran under.
    #[prost(message, optional, tag = "6")]
    pub(crate) limits: Option<pb::Limits>,
    /// Calls the script made, refused ones included (the call cap).
    #[prost(uint32, tag = "7")]
    pub(crate) calls_made: u32,
    /// Batches the script sent.
    #[prost(uint32, tag = "8")]
    pub(crate) batches: u32,
    /// The cap's breach was reported (it is reported once).
    #[prost(bool, tag = "9")]
    pub(crate) cap_reported: bool,
    /// What the run used; `wall_time_us` counts live time only.
    #[prost(message, optional, tag = "10")]
    pub(crate) stats: Option<pb::RunStats>,
    /// Output kept so far.
    #[prost(bytes = "vec", tag = "11")]
    pub(crate) stdout: Vec<u8>,
    /// Output kept so far.
    #[prost(bytes = "vec", tag = "12")]
    pub(crate) stderr: Vec<u8>,
    /// Output was dropped at the output limit.
    #[prost(bool, tag = "13")]
    pub(crate) output_truncated: bool,
    /// The batch the run waits on, in the script's order.
    #[prost(message, repeated, tag = "14")]
    pub(crate) batch: Vec<BatchCall>,
    /// The guest's own state, opaque to the host.
    #[prost(bytes = "vec", tag = "15")]
    pub(crate) guest_state: Vec<u8>,
}

impl Carried {
    /// The ids of the calls whose answers the run still waits on.
    pub(crate) fn awaiting(&self) -> Vec<String> {
        self.batch.iter().filter(|call| call.answer_json.is_none()).map(|call| call.id.clone()).collect()
    }
}

/// Why a parked state cannot resume a run. Each says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResumeRefused {
    /// Not a sealed state, cut short, or altered.
    #[error(
        "the parked state is not one this sidecar sealed: it is truncated, altered, or sealed with another park key; give every sidecar the same `--park-key-file`, or start the script again"
    )]
    Unsealed,
    /// Sealed by a sidecar of another format, or parked by another guest build.
    #[error("the run was parked by {what}; resume it on a sidecar running that build, or start the script again")]
    OtherBuild {
        /// Which build, in words.
        what: String,
    },
    /// Sealed for another turn or run.
    #[error("the parked state belongs to {field} `{sealed}`, not `{given}`; resume each run with its own state")]
    OtherRun {
        /// `turn_id` or `run_id`.
        field: &'static str,
        /// The id it was sealed for.
        sealed: String,
        /// The id the resuming `Start` gave.
        given: String,
    },
}

impl ResumeRefused {
    /// The run error kind the backend gets.
    pub(crate) fn kind(&self) -> RunErrorKind {
        match self {
            ResumeRefused::OtherBuild { .. } => RunErrorKind::ParkedByOtherBuild,
            ResumeRefused::Unsealed | ResumeRefused::OtherRun { .. } => RunErrorKind::ParkedStateInvalid,
        }
    }
}

/// `carried`, deflated and sealed under `key`.
pub(crate) fn seal(key: &ParkKey, carried: &Carried) -> Vec<u8> {
    let body = deflate(&carried.encode_to_vec());
    let mut mac = key.seal();
    mac.update(MAGIC);
    mac.update(&[FORMAT]);
    mac.update(&body);
    let tag = mac.finalize().into_bytes();
    let mut sealed = Vec::with_capacity(HEADER_BYTES + body.len());
    sealed.extend_from_slice(MAGIC);
    sealed.push(FORMAT);
    sealed.extend_from_slice(&tag);
    sealed.extend_from_slice(&body);
    sealed
}

/// The deflate level of sealed bodies: zlib's default.
const DEFLATE_LEVEL: i32 = 6;

thread_local! {
    /// One compressor per thread, reset for each seal: a new one allocates
    /// and zeroes its dictionary and hash tables (some 160 KiB), which was
    /// about 45 µs of every park.
    static DEFLATER: RefCell<CompressorOxide> =
        RefCell::new(CompressorOxide::new(create_comp_flags_from_zip_params(DEFLATE_LEVEL, 0, 0)));
}

/// `bytes` as a raw deflate stream, on this thread's [`DEFLATER`].
fn deflate(bytes: &[u8]) -> Vec<u8> {
    DEFLATER.with_borrow_mut(|compressor| {
        compressor.reset();
        let mut out = Vec::with_capacity(bytes.len() / 2 + 64);
        let (status, _) = compress_to_output(compressor, bytes, TDEFLFlush::Finish, |chunk| {
            out.extend_from_slice(chunk);
            true
        });
        // The callback never refuses and the input is whole, so it is done;
        // were it not, a compressor of its own says the same as before.
        if status == TDEFLStatus::Done {
            out
        } else {
            tracing::warn!(?status, "the reused compressor did not finish; deflating with a new one");
            miniz_oxide::deflate::compress_to_vec(bytes, DEFLATE_LEVEL as u8)
        }
    })
}

/// What `sealed` carries, once its seal, format, guest build and owner are
/// checked: it must have been sealed under `key` for `turn_id`'s run
/// `run_id` by the guest whose module hashes to `guest_build`.
///
/// # Errors
/// [`ResumeRefused`], saying which check failed.
pub(crate) fn unseal(
    key: &ParkKey,
    sealed: &[u8],
    guest_build: &[u8],
    turn_id: &str,
    run_id: &str,
) -> Result<Carried, ResumeRefused> {
    let (Some(magic), Some(&format), Some(tag), Some(body)) = (
        sealed.get(..MAGIC.len()),
        sealed.get(MAGIC.len()),
        sealed.get(MAGIC.len() + 1..HEADER_BYTES),
        sealed.get(HEADER_BYTES..),
    ) else {
        return Err(ResumeRefused::Unsealed);
    };
    if magic != MAGIC {
        return Err(ResumeRefused::Unsealed);
    }
    if format != FORMAT {
        return Err(ResumeRefused::OtherBuild { what: format!("a sidecar that writes park format `{format}`") });
    }
    let mut mac = key.seal();
    mac.update(MAGIC);
    mac.update(&[format]);
    mac.update(body);
    mac.verify_slice(tag).map_err(|_| ResumeRefused::Unsealed)?;
    // Sealed by a sidecar with this key: a body that does not inflate or
    // decode is a bug of that sidecar, and refused the same way.
    let body = miniz_oxide::inflate::decompress_to_vec_with_limit(body, MAX_BODY_BYTES)
        .map_err(|_| ResumeRefused::Unsealed)?;
    let carried = Carried::decode(body.as_slice()).map_err(|_| ResumeRefused::Unsealed)?;
    if carried.guest_build != guest_build {
        return Err(ResumeRefused::OtherBuild { what: "another build of its runtime".to_owned() });
    }
    if carried.turn_id != turn_id {
        return Err(ResumeRefused::OtherRun { field: "turn_id", sealed: carried.turn_id, given: turn_id.to_owned() });
    }
    if carried.run_id != run_id {
        return Err(ResumeRefused::OtherRun { field: "run_id", sealed: carried.run_id, given: run_id.to_owned() });
    }
    Ok(carried)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carried() -> Carried {
        Carried {
            guest_build: vec![7; 32],
            turn_id: "turn-1".into(),
            run_id: "run-1".into(),
            calls_made: 3,
            guest_state: b"the guest's".to_vec(),
            batch: vec![BatchCall { id: "run-1/3".into(), name: "t".into(), answer_json: None }],
            ..Carried::default()
        }
    }

    #[test]
    fn a_sealed_state_unseals_for_its_own_run_only() {
        let key = ParkKey::random().unwrap();
        let sealed = seal(&key, &carried());
        assert_eq!(unseal(&key, &sealed, &[7; 32], "turn-1", "run-1"), Ok(carried()));
        assert_eq!(carried().awaiting(), vec!["run-1/3".to_owned()]);
        let other_turn = unseal(&key, &sealed, &[7; 32], "turn-2", "run-1").unwrap_err();
        assert_eq!(other_turn.kind(), RunErrorKind::ParkedStateInvalid);
        assert!(other_turn.to_string().contains("turn_id `turn-1`, not `turn-2`"), "{other_turn}");
        assert!(matches!(unseal(&key, &sealed, &[7; 32], "turn-1", "run-2"), Err(ResumeRefused::OtherRun { .. })));
        let other_build = unseal(&key, &sealed, &[8; 32], "turn-1", "run-1").unwrap_err();
        assert_eq!(other_build.kind(), RunErrorKind::ParkedByOtherBuild);
    }

    #[test]
    fn a_cut_altered_or_foreign_state_is_refused() {
        let key = ParkKey::random().unwrap();
        let sealed = seal(&key, &carried());
        let check = |bytes: &[u8]| unseal(&key, bytes, &[7; 32], "turn-1", "run-1");
        for len in [0, 3, MAGIC.len(), HEADER_BYTES - 1, HEADER_BYTES, sealed.len() - 1] {
            assert_eq!(check(&sealed[..len]), Err(ResumeRefused::Unsealed), "cut to {len} bytes");
        }
        for at in [0, MAGIC.len() + 3, HEADER_BYTES + 2, sealed.len() - 1] {
            let mut altered = sealed.clone();
            altered[at] ^= 1;
            assert_ne!(check(&altered).ok(), Some(carried()), "byte {at} flipped");
        }
        // A forger without the key: a body re-sealed under another key.
        let forged = seal(&ParkKey::random().unwrap(), &Carried { calls_made: 0, ..carried() });
        assert_eq!(check(&forged), Err(ResumeRefused::Unsealed));
        let mut other_format = sealed.clone();
        other_format[MAGIC.len()] = FORMAT + 1;
        assert_eq!(check(&other_format).map_err(|e| e.kind()), Err(RunErrorKind::ParkedByOtherBuild));
    }

    #[test]
    fn a_key_needs_32_bytes_and_the_same_secret_gives_the_same_key() {
        assert_eq!(ParkKey::from_secret(&[1; 31]).unwrap_err(), ShortParkKey(31));
        let (a, b) = (ParkKey::from_secret(&[1; 32]).unwrap(), ParkKey::from_secret(&[1; 32]).unwrap());
        let sealed = seal(&a, &carried());
        assert!(unseal(&b, &sealed, &[7; 32], "turn-1", "run-1").is_ok());
        assert!(format!("{a:?}").contains("redacted"));
    }
}
