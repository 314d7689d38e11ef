//! The bytes of a parked state: a fixed header, the runner's part (JSON),
//! then monty's dump, unchanged.
//!
//! ```text
//! offset  size  field
//!      0     8  MAGIC, "TPYPARK\0"
//!      8     1  FORMAT (1)
//!      9     8  checksum: FNV-1a 64 of every byte from offset 17 to the end, little-endian
//!     17     8  the script's fingerprint: FNV-1a 64 of its source, little-endian
//!     25     4  length of the runner's part, little-endian
//!     29     …  the runner's part, then monty's dump to the end
//! ```
//!
//! Why this framing:
//! - monty's dump is kept whole and last: it has its own magic, version and
//!   trailing-bytes check, and copying it unchanged costs nothing to decode.
//! - The runner's part is JSON: a few hundred bytes of ids, tool requests
//!   (already JSON values) and durations, readable in a debugger, and serde
//!   lets it gain fields with defaults without a new format.
//! - The checksum is checked before monty sees a byte: monty does not
//!   promise to fail cleanly on a damaged dump (`Dump::load` may panic on
//!   one), and a panic in the guest is a trap, not an answer. It catches
//!   truncation and corruption, not forgery: the host seals the state it
//!   keeps (HMAC) and binds it to its run, so a forged state never gets here.
//! - The fingerprint ties the state to its script: a state resumed under
//!   another source is refused by name instead of running one script's
//!   suspended code while reporting tracebacks from another's text.

use std::fmt;

/// The first bytes of every parked state this runtime writes.
const MAGIC: &[u8; 8] = b"TPYPARK\0";

/// The format of everything after the magic; a state of another is refused.
pub const FORMAT: u8 = 1;

/// Bytes before the runner's part.
pub const HEADER_BYTES: usize = MAGIC.len() + 1 + 8 + 8 + 4;

/// The state of a script whose source has `fingerprint`, made of the
/// runner's part `runner` and monty's `dump`; `None` if `runner` is longer
/// than 4 GiB, which no runner part comes near.
pub fn seal(fingerprint: u64, runner: &[u8], dump: &[u8]) -> Option<Vec<u8>> {
    let runner_len = u32::try_from(runner.len()).ok()?;
    let mut bytes = Vec::with_capacity(HEADER_BYTES + runner.len() + dump.len());
    bytes.extend_from_slice(MAGIC);
    bytes.push(FORMAT);
    let checksum_at = bytes.len();
    bytes.extend_from_slice(&[0; 8]);
    bytes.extend_from_slice(&fingerprint.to_le_bytes());
    bytes.extend_from_slice(&runner_len.to_le_bytes());
    bytes.extend_from_slice(runner);
    bytes.extend_from_slice(dump);
    let checksum = fnv1a(&bytes[checksum_at + 8..]);
    bytes[checksum_at..checksum_at + 8].copy_from_slice(&checksum.to_le_bytes());
    Some(bytes)
}

/// The runner's part and monty's dump of `bytes`, a state sealed for the
/// script whose source has `fingerprint`.
///
/// # Errors
/// [`FrameError`] saying what is wrong with `bytes`.
pub fn open(bytes: &[u8], fingerprint: u64) -> Result<(&[u8], &[u8]), FrameError> {
    if bytes.is_empty() {
        return Err(FrameError::Empty);
    }
    // A state cut inside the magic is one of ours, cut short.
    let present = bytes.len().min(MAGIC.len());
    if bytes[..present] != MAGIC[..present] {
        return Err(FrameError::NotOurs);
    }
    let mut rest = bytes;
    take::<8>(&mut rest).ok_or(FrameError::Damaged)?;
    let [format] = take::<1>(&mut rest).ok_or(FrameError::Damaged)?;
    if format != FORMAT {
        return Err(FrameError::OtherFormat(format));
    }
    let checksum = u64::from_le_bytes(take::<8>(&mut rest).ok_or(FrameError::Damaged)?);
    if checksum != fnv1a(rest) {
        return Err(FrameError::Damaged);
    }
    if take::<8>(&mut rest).map(u64::from_le_bytes) != Some(fingerprint) {
        return Err(FrameError::OtherScript);
    }
    let runner_len = take::<4>(&mut rest).map(u32::from_le_bytes).ok_or(FrameError::Damaged)?;
    match usize::try_from(runner_len) {
        Ok(len) if len <= rest.len() => Ok(rest.split_at(len)),
        // The checksum matched, so only a writer of another format gets here.
        _ => Err(FrameError::Damaged),
    }
}

/// The first `N` bytes of `bytes`, which then starts after them.
fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = bytes.split_first_chunk::<N>()?;
    *bytes = rest;
    Some(*head)
}

/// The fingerprint of a script: FNV-1a 64 of its source.
pub fn fingerprint(source: &str) -> u64 {
    fnv1a(source.as_bytes())
}

/// Why a state's bytes are not a parked state of this script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// No bytes at all.
    Empty,
    /// Bytes that do not start as this runtime's states do.
    NotOurs,
    /// A state of another format version, which this build does not read.
    OtherFormat(u8),
    /// Cut short, or bytes changed since it was written.
    Damaged,
    /// A state written for another script.
    OtherScript,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Empty => f.write_str("the parked state is empty"),
            FrameError::NotOurs => f.write_str("the parked state is not one tether-python wrote (its magic is wrong)"),
            FrameError::OtherFormat(format) => write!(
                f,
                "the parked state is of format version `{format}`; this build of tether-python reads version `{FORMAT}`"
            ),
            FrameError::Damaged => {
                f.write_str("the parked state is truncated or damaged (its checksum does not match)")
            }
            FrameError::OtherScript => f.write_str(
                "the parked state belongs to another script (the resuming start's source is not the one that parked)",
            ),
        }
    }
}

/// FNV-1a, 64 bits: spelled out so the checksum cannot change with a
/// dependency or the standard library's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(PRIME))
}
