//! Accepting the `:authority` that common clients send on a Unix socket.
//!
//! grpc-python (grpcio, the C core) sends a Unix socket's path, percent-encoded,
//! as the HTTP/2 `:authority` (`tmp%2Fs.sock` for `unix:/tmp/s.sock`). The `http`
//! crate's `Authority` allows `%` only in userinfo, so h2's server refuses such a
//! request ("malformed headers: malformed authority") and resets the stream with
//! PROTOCOL_ERROR; the client sees `INTERNAL "Stream removed"`. The request never
//! reaches hyper or tonic, so no tower layer can mend it, and neither h2 nor
//! hyper has a switch to relax the check.
//!
//! So the Unix listener wraps each accepted connection in [`AuthorityRewrite`],
//! which rewrites the client→server bytes at the HTTP/2 frame level before h2
//! reads them:
//! - the connection preface and every frame pass through unchanged, except
//!   HEADERS and their CONTINUATION frames;
//! - the connection's first header block decides. If its `:authority` is valid
//!   (or absent), the block goes on byte for byte and so does the rest of the
//!   connection: nothing more is decoded. A client's authority is its channel's
//!   target, the same on every request of a connection; a client that changed it
//!   to an invalid one later would get h2's refusal of that stream, as without
//!   this adapter. Our own clients, and every client that sends a host and port,
//!   pay for one decode per connection, not one per request;
//! - otherwise every header block of the connection is HPACK-decoded, with one
//!   decoder that sees every block in order (trailers too), so it follows the
//!   client's dynamic table;
//! - an `:authority` that is not a valid authority becomes [`FALLBACK_AUTHORITY`]
//!   (what grpc-go sends on a Unix socket); a valid one is left alone;
//! - the block is re-encoded with literals without indexing, so h2's dynamic
//!   table stays empty and no encoder state toward h2 is needed. Every block is
//!   re-encoded, not only the rewritten ones: h2 must never see an index into a
//!   table it was not told to fill;
//! - the block goes out as HEADERS (+ CONTINUATION) of at most
//!   [`MAX_FRAME_PAYLOAD`] bytes, keeping END_STREAM and the priority fields and
//!   dropping padding.
//!
//! Server→client bytes pass through untouched. A connection that does not start
//! with the HTTP/2 preface passes through untouched too (h2 then refuses it as it
//! would anyway).
//!
//! Other ways considered: forking or `[patch]`ing h2 (a fork to keep up with for
//! one check), a client option (`grpc.default_authority`: every user must know
//! it), terminating HTTP/2 in front of h2 (a second HTTP/2 stack to no gain).
//!
//! HPACK decoding uses `loona-hpack`, the maintained successor of the `hpack`
//! crate (by way of `fluke-hpack`, renamed with its project); `hpack` itself
//! has had no release since 2016 and `httlib-hpack` since 2021.
//!
//! # Limits
//! A malformed stream (a CONTINUATION out of place, padding or priority fields
//! longer than the frame, bad HPACK, a dynamic table size update over h2's
//! `4096`) ends the connection with an [`AuthorityError`] as the read error. The
//! buffered header block and the decoded header list are each capped at
//! [`MAX_HEADER_BLOCK`], four times hyper's default maximum header list size, so
//! a header list h2 would refuse still reaches h2, which refuses that one stream.

use bytes::{Buf, BytesMut};
use loona_hpack::Decoder;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// The authority put in place of one that does not parse.
pub(crate) const FALLBACK_AUTHORITY: &[u8] = b"localhost";

/// The largest frame payload sent to h2: the HTTP/2 default SETTINGS_MAX_FRAME_SIZE,
/// which hyper's server advertises and tonic does not change.
pub(crate) const MAX_FRAME_PAYLOAD: usize = 16 * 1024;

/// The cap on a buffered header block and on its decoded header list (sized as
/// HTTP/2 counts it: name, value and 32 bytes a field).
pub(crate) const MAX_HEADER_BLOCK: usize = 64 * 1024;

/// The dynamic table size h2 advertises (the HTTP/2 default); a client may not
/// ask for more.
const MAX_DYNAMIC_TABLE: usize = 4096;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEAD: usize = 9;
const READ_CHUNK: usize = 8 * 1024;

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const PRIORITY_LEN: usize = 5;

/// Why a client's byte stream could not be rewritten; the connection ends.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthorityError {
    /// A header block (or one frame of it) is over [`MAX_HEADER_BLOCK`].
    #[error("header block of at least `{0}` bytes is over the `{MAX_HEADER_BLOCK}` byte limit")]
    BlockTooLarge(usize),
    /// A decoded header list is over [`MAX_HEADER_BLOCK`].
    #[error("decoded header list is over the `{MAX_HEADER_BLOCK}` byte limit")]
    ListTooLarge,
    /// A HEADERS frame's padding or priority fields do not fit in it.
    #[error("HEADERS frame on stream `{0}` is shorter than its padding and priority fields")]
    ShortFrame(u32),
    /// A header block was open and another frame came.
    #[error("expected a CONTINUATION frame on stream `{stream}`, got type `{kind}` on stream `{got}`")]
    ExpectedContinuation {
        /// The stream whose header block is open.
        stream: u32,
        /// The frame type that came.
        kind: u8,
        /// The stream it came on.
        got: u32,
    },
    /// A CONTINUATION frame came with no header block open.
    #[error("CONTINUATION frame on stream `{0}` with no header block open")]
    UnexpectedContinuation(u32),
    /// The header block does not decode.
    #[error("header block does not decode: {0}")]
    Hpack(#[from] loona_hpack::decoder::DecoderError),
}

impl From<AuthorityError> for io::Error {
    fn from(error: AuthorityError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }
}

/// A connection whose client→server bytes go through a [`Rewriter`].
#[derive(Debug)]
pub(crate) struct AuthorityRewrite<IO> {
    inner: IO,
    rewriter: Rewriter,
    /// Read from `inner`, not yet rewritten.
    input: BytesMut,
    /// Rewritten, not yet read.
    output: BytesMut,
    /// `inner` reached its end or the stream failed: reads return end of file.
    done: bool,
}

impl<IO> AuthorityRewrite<IO> {
    /// Wraps an accepted connection.
    pub(crate) fn new(inner: IO) -> AuthorityRewrite<IO> {
        AuthorityRewrite {
            inner,
            rewriter: Rewriter::new(),
            input: BytesMut::new(),
            output: BytesMut::new(),
            done: false,
        }
    }
}

impl<IO: Connected> Connected for AuthorityRewrite<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> IO::ConnectInfo {
        self.inner.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for AuthorityRewrite<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output[..n]);
                this.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.done {
                return Poll::Ready(Ok(()));
            }
            if this.rewriter.passes_everything() && this.input.is_empty() {
                // Nothing left to look at: read straight into the caller's buffer.
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // Bytes of an unfinished frame are dropped: h2 sees the
                // connection end between frames, as after a clean close.
                this.done = true;
                continue;
            }
            this.input.extend_from_slice(read.filled());
            if let Err(error) = this.rewriter.feed(&mut this.input, &mut this.output) {
                tracing::warn!(%error, "ending a Unix socket connection whose HTTP/2 stream cannot be read");
                this.done = true;
                this.input.clear();
                this.output.clear();
                return Poll::Ready(Err(error.into()));
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for AuthorityRewrite<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The client→server rewrite, on bytes: the connection's HPACK decoder and
/// where it is in the frame stream.
pub(crate) struct Rewriter {
    state: State,
    decoder: Decoder<'static>,
    /// The header block being gathered from HEADERS and CONTINUATION frames.
    block: Option<OpenBlock>,
    /// The connection's first header block needed mending: every block is
    /// decoded and re-encoded from then on.
    mending: bool,
}

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewriter").field("state", &self.state).field("block", &self.block).finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// This many bytes of the preface seen.
    Preface(usize),
    /// At a frame boundary.
    FrameHead,
    /// Passing this many bytes of a frame's payload through.
    Payload(usize),
    /// Everything passes through: not HTTP/2 with prior knowledge, or its
    /// first header block needed no mending.
    Passthrough,
}

#[derive(Debug)]
struct OpenBlock {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; PRIORITY_LEN]>,
    fragment: Vec<u8>,
    /// The block's frames as they came, while the first block may yet go on
    /// unchanged.
    frames: Vec<u8>,
}

struct FrameHead {
    len: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl FrameHead {
    fn parse(head: &[u8; FRAME_HEAD]) -> FrameHead {
        FrameHead {
            len: usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]),
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        }
    }
}

impl Rewriter {
    /// A rewriter for a new connection.
    pub(crate) fn new() -> Rewriter {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(MAX_DYNAMIC_TABLE);
        Rewriter { state: State::Preface(0), decoder, block: None, mending: false }
    }

    /// True once nothing more of the connection is looked at: every byte
    /// passes through as it is.
    pub(crate) fn passes_everything(&self) -> bool {
        matches!(self.state, State::Passthrough)
    }

    /// Consumes what it can of `input` (a frame's bytes stay until the whole
    /// frame is there if it carries a header block) and appends the rewritten
    /// bytes to `output`.
    ///
    /// # Errors
    /// If the stream is not valid HTTP/2 past the preface, or over a limit; the
    /// connection cannot go on.
    pub(crate) fn feed(&mut self, input: &mut BytesMut, output: &mut BytesMut) -> Result<(), AuthorityError> {
        loop {
            match self.state {
                State::Passthrough => {
                    output.extend_from_slice(input);
                    input.clear();
                    return Ok(());
                }
                State::Preface(seen) => {
                    let rest = &PREFACE[seen..];
                    let n = rest.len().min(input.len());
                    if input[..n] != rest[..n] {
                        self.state = State::Passthrough;
                        continue;
                    }
                    output.extend_from_slice(&input[..n]);
                    input.advance(n);
                    if seen + n < PREFACE.len() {
                        self.state = State::Preface(seen + n);
                        return Ok(());
                    }
                    self.state = State::FrameHead;
                }
                State::Payload(left) => {
                    let n = left.min(input.len());
                    output.extend_from_slice(&input[..n]);
                    input.advance(n);
                    if n < left {
                        self.state = State::Payload(left - n);
                        return Ok(());
                    }
                    self.state = State::FrameHead;
                }
                State::FrameHead => {
                    let Some(head) = input.first_chunk::<FRAME_HEAD>() else { return Ok(()) };
                    let head = FrameHead::parse(head);
                    if head.kind == HEADERS || head.kind == CONTINUATION {
                        if head.len > MAX_HEADER_BLOCK {
                            return Err(AuthorityError::BlockTooLarge(head.len));
                        }
                        if input.len() < FRAME_HEAD + head.len {
                            return Ok(());
                        }
                        let frame = input.split_to(FRAME_HEAD + head.len);
                        self.header_frame(&head, &frame, output)?;
                    } else {
                        if let Some(block) = &self.block {
                            return Err(AuthorityError::ExpectedContinuation {
                                stream: block.stream,
                                kind: head.kind,
                                got: head.stream,
                            });
                        }
                        output.extend_from_slice(&input[..FRAME_HEAD]);
                        input.advance(FRAME_HEAD);
                        self.state = State::Payload(head.len);
                    }
                }
            }
        }
    }

    /// Takes in one HEADERS or CONTINUATION `frame` (head and payload); sends
    /// the block on once it is complete.
    fn header_frame(&mut self, head: &FrameHead, frame: &[u8], output: &mut BytesMut) -> Result<(), AuthorityError> {
        let payload = &frame[FRAME_HEAD..];
        let mut block = match (head.kind, self.block.take()) {
            (HEADERS, None) => {
                let mut payload = payload;
                if head.flags & PADDED != 0 {
                    let Some((&pad, rest)) = payload.split_first() else {
                        return Err(AuthorityError::ShortFrame(head.stream));
                    };
                    let Some(end) = rest.len().checked_sub(usize::from(pad)) else {
                        return Err(AuthorityError::ShortFrame(head.stream));
                    };
                    payload = &rest[..end];
                }
                let mut priority = None;
                if head.flags & PRIORITY != 0 {
                    let Some((fields, rest)) = payload.split_first_chunk::<PRIORITY_LEN>() else {
                        return Err(AuthorityError::ShortFrame(head.stream));
                    };
                    priority = Some(*fields);
                    payload = rest;
                }
                OpenBlock {
                    stream: head.stream,
                    end_stream: head.flags & END_STREAM != 0,
                    priority,
                    fragment: payload.to_vec(),
                    frames: Vec::new(),
                }
            }
            (CONTINUATION, Some(mut block)) if block.stream == head.stream => {
                if block.fragment.len() + payload.len() > MAX_HEADER_BLOCK {
                    return Err(AuthorityError::BlockTooLarge(block.fragment.len() + payload.len()));
                }
                block.fragment.extend_from_slice(payload);
                block
            }
            // Only HEADERS and CONTINUATION come here: this is a CONTINUATION.
            (_, None) => return Err(AuthorityError::UnexpectedContinuation(head.stream)),
            (_, Some(block)) => {
                return Err(AuthorityError::ExpectedContinuation {
                    stream: block.stream,
                    kind: head.kind,
                    got: head.stream,
                });
            }
        };
        if !self.mending {
            block.frames.extend_from_slice(frame);
        }
        if head.flags & END_HEADERS == 0 {
            self.block = Some(block);
            return Ok(());
        }
        let (encoded, mended) = self.rewrite(&block)?;
        if mended || self.mending {
            self.mending = true;
            write_block(&block, &encoded, output);
        } else {
            // The first block, as it came: h2's dynamic table then follows the
            // client's, and everything after it passes through.
            output.extend_from_slice(&block.frames);
            self.state = State::Passthrough;
        }
        Ok(())
    }

    /// Decodes a complete header block and re-encodes it, mending `:authority`;
    /// true if it did.
    fn rewrite(&mut self, block: &OpenBlock) -> Result<(Vec<u8>, bool), AuthorityError> {
        let mut encoded = Vec::with_capacity(block.fragment.len());
        let mut list_size = 0usize;
        let mut over = false;
        let mut mended = false;
        self.decoder.decode_with_cb(&block.fragment, |name, value| {
            // Keep decoding past the cap, so the table stays in step; just
            // stop keeping what it yields.
            list_size = list_size.saturating_add(name.len() + value.len() + 32);
            over |= list_size > MAX_HEADER_BLOCK;
            if over {
                return;
            }
            let value: &[u8] = if &*name == b":authority" && http::uri::Authority::try_from(&*value).is_err() {
                tracing::debug!(
                    stream = block.stream,
                    authority = %String::from_utf8_lossy(&value),
                    "replacing an invalid :authority with `localhost`",
                );
                mended = true;
                FALLBACK_AUTHORITY
            } else {
                &value
            };
            encode_literal(&name, value, &mut encoded);
        })?;
        if over {
            return Err(AuthorityError::ListTooLarge);
        }
        Ok((encoded, mended))
    }
}

/// Appends a literal header field without indexing, with a literal name and
/// no Huffman coding (RFC 7541 §6.2.2).
fn encode_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    encode_string(name, out);
    encode_string(value, out);
}

fn encode_string(s: &[u8], out: &mut Vec<u8>) {
    // A 7-bit prefix integer (RFC 7541 §5.1) with the Huffman bit clear.
    let mut len = s.len();
    if len < 0x7f {
        out.push(len as u8);
    } else {
        out.push(0x7f);
        len -= 0x7f;
        while len >= 0x80 {
            out.push((len & 0x7f) as u8 | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
    }
    out.extend_from_slice(s);
}

/// Appends `encoded` as a HEADERS frame and as many CONTINUATION frames as
/// it takes.
fn write_block(block: &OpenBlock, encoded: &[u8], output: &mut BytesMut) {
    let first_room = MAX_FRAME_PAYLOAD - block.priority.map_or(0, |_| PRIORITY_LEN);
    let (first, mut rest) = encoded.split_at(first_room.min(encoded.len()));
    let mut flags = if block.end_stream { END_STREAM } else { 0 };
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    let mut payload = first.to_vec();
    if let Some(fields) = block.priority {
        flags |= PRIORITY;
        payload.splice(0..0, fields);
    }
    write_frame(HEADERS, flags, block.stream, &payload, output);
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(MAX_FRAME_PAYLOAD.min(rest.len()));
        rest = after;
        write_frame(CONTINUATION, if rest.is_empty() { END_HEADERS } else { 0 }, block.stream, chunk, output);
    }
}

fn write_frame(kind: u8, flags: u8, stream: u32, payload: &[u8], output: &mut BytesMut) {
    // `payload` is at most MAX_FRAME_PAYLOAD, well within the 24-bit length.
    let len = payload.len().to_be_bytes();
    let len = &len[len.len() - 3..];
    output.extend_from_slice(len);
    output.extend_from_slice(&[kind, flags]);
    output.extend_from_slice(&stream.to_be_bytes());
    output.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use loona_hpack::Encoder;

    /// A request's header fields, as grpc-python sends them on a Unix socket.
    fn request(authority: &[u8]) -> Vec<(&'static [u8], Vec<u8>)> {
        vec![
            (b":scheme", b"http".to_vec()),
            (b":method", b"POST".to_vec()),
            (b":authority", authority.to_vec()),
            (b":path", b"/tether.v1.Sidecar/Describe".to_vec()),
            (b"te", b"trailers".to_vec()),
            (b"content-type", b"application/grpc".to_vec()),
        ]
    }

    fn encode(encoder: &mut Encoder<'static>, fields: &[(&'static [u8], Vec<u8>)]) -> Vec<u8> {
        encoder.encode(fields.iter().map(|(n, v)| (*n, v.as_slice())))
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        write_frame(kind, flags, stream, payload, &mut out);
        out.to_vec()
    }

    fn connection(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        frames.iter().for_each(|f| bytes.extend_from_slice(f));
        bytes
    }

    /// Feeds `bytes` to a new rewriter `step` bytes at a time; the rewritten
    /// bytes and the input bytes left unconsumed.
    fn feed_in_steps(bytes: &[u8], step: usize) -> Result<(Vec<u8>, BytesMut), AuthorityError> {
        let mut rewriter = Rewriter::new();
        let (mut input, mut output) = (BytesMut::new(), BytesMut::new());
        for piece in bytes.chunks(step) {
            input.extend_from_slice(piece);
            rewriter.feed(&mut input, &mut output)?;
        }
        Ok((output.to_vec(), input))
    }

    /// Rewrites a whole connection's worth of bytes.
    fn rewrite(bytes: &[u8], step: usize) -> Result<Vec<u8>, AuthorityError> {
        let (output, left) = feed_in_steps(bytes, step)?;
        assert!(left.is_empty(), "bytes left over: {left:?}");
        Ok(output)
    }

    struct Frame {
        kind: u8,
        flags: u8,
        stream: u32,
        payload: Vec<u8>,
    }

    fn frames(bytes: &[u8]) -> Vec<Frame> {
        assert_eq!(&bytes[..PREFACE.len()], PREFACE);
        let mut rest = &bytes[PREFACE.len()..];
        let mut out = Vec::new();
        while !rest.is_empty() {
            let head = FrameHead::parse(rest.first_chunk().unwrap());
            out.push(Frame {
                kind: head.kind,
                flags: head.flags,
                stream: head.stream,
                payload: rest[FRAME_HEAD..FRAME_HEAD + head.len].to_vec(),
            });
            rest = &rest[FRAME_HEAD + head.len..];
        }
        out
    }

    /// Decodes a rewritten block with a fresh decoder: the rewrite must not
    /// rely on any dynamic table on h2's side.
    fn decode_fresh(block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        Decoder::new().decode(block).unwrap()
    }

    fn authority(fields: &[(Vec<u8>, Vec<u8>)]) -> &[u8] {
        &fields.iter().find(|(n, _)| n == b":authority").unwrap().1
    }

    #[test]
    fn a_valid_first_authority_lets_the_whole_connection_through_unchanged() {
        let mut encoder = Encoder::new();
        let block = encode(&mut encoder, &request(b"127.0.0.1:50051"));
        let settings = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        let data = frame(0x0, END_STREAM, 1, b"\0\0\0\0\0");
        // After the first block nothing is decoded: a later invalid authority
        // and a block that does not even decode reach h2 as they came.
        let later = encode(&mut encoder, &request(b"tmp%2Fs.sock"));
        let input = connection(&[
            settings,
            frame(HEADERS, END_HEADERS | PADDED, 1, &[&[2u8][..], &block, &[0, 0]].concat()),
            data,
            frame(HEADERS, END_HEADERS, 3, &later),
            frame(HEADERS, END_HEADERS, 5, &[0xff, 0x7f]),
        ]);
        for step in [1, 7, input.len()] {
            assert_eq!(rewrite(&input, step).unwrap(), input, "fed {step} bytes at a time");
        }
        // A first block in several frames goes on as those frames.
        let (a, b) = block.split_at(10);
        let input = connection(&[frame(HEADERS, 0, 1, a), frame(CONTINUATION, END_HEADERS, 1, b)]);
        assert_eq!(rewrite(&input, 3).unwrap(), input);
    }

    #[test]
    fn once_the_first_block_is_mended_every_block_is_reencoded() {
        let mut encoder = Encoder::new();
        let first = encode(&mut encoder, &request(b"tmp%2Fs.sock"));
        let second = encode(&mut encoder, &request(b"127.0.0.1:50051"));
        let input =
            connection(&[frame(HEADERS, END_HEADERS, 1, &first), frame(HEADERS, END_HEADERS | END_STREAM, 3, &second)]);
        let out = frames(&rewrite(&input, 11).unwrap());
        assert_eq!(authority(&decode_fresh(&out[0].payload)), b"localhost");
        // Decodable with no dynamic table, though the client's encoder may
        // have referred to its table: re-encoded too.
        let fields = decode_fresh(&out[1].payload);
        assert_eq!(authority(&fields), b"127.0.0.1:50051");
        assert_eq!(fields.len(), 6);
        assert_eq!((out[1].flags, out[1].stream), (END_HEADERS | END_STREAM, 3));
    }

    #[test]
    fn a_percent_encoded_authority_becomes_localhost() {
        let block = encode(&mut Encoder::new(), &request(b"tmp%2Fs.sock"));
        let out = rewrite(&connection(&[frame(HEADERS, END_HEADERS | END_STREAM, 3, &block)]), 5).unwrap();
        let out = frames(&out);
        assert_eq!((out[0].kind, out[0].flags, out[0].stream), (HEADERS, END_HEADERS | END_STREAM, 3));
        let fields = decode_fresh(&out[0].payload);
        assert_eq!(authority(&fields), b"localhost");
        assert_eq!(fields[3], (b":path".to_vec(), b"/tether.v1.Sidecar/Describe".to_vec()));
    }

    #[test]
    fn continuation_frames_are_gathered_and_a_big_block_is_split() {
        let mut fields = request(b"tmp%2Fs.sock");
        fields.push((b"x-big", vec![b'a'; 20_000]));
        let block = encode(&mut Encoder::new(), &fields);
        let (a, b) = block.split_at(100);
        let input = connection(&[frame(HEADERS, 0, 1, a), frame(CONTINUATION, END_HEADERS, 1, b)]);
        let out = frames(&rewrite(&input, 1000).unwrap());
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].kind, out[0].flags, out[0].payload.len()), (HEADERS, 0, MAX_FRAME_PAYLOAD));
        assert_eq!((out[1].kind, out[1].flags, out[1].stream), (CONTINUATION, END_HEADERS, 1));
        let joined = [out[0].payload.clone(), out[1].payload.clone()].concat();
        let decoded = decode_fresh(&joined);
        assert_eq!(authority(&decoded), b"localhost");
        assert_eq!(decoded[6].1.len(), 20_000);
    }

    #[test]
    fn padding_is_dropped_and_priority_kept() {
        let block = encode(&mut Encoder::new(), &request(b"tmp%2Fs.sock"));
        let priority = [0x80, 0, 0, 0, 15];
        let payload = [&[4u8][..], &priority, &block, &[0; 4]].concat();
        let input = connection(&[frame(HEADERS, END_HEADERS | PADDED | PRIORITY, 1, &payload)]);
        let out = frames(&rewrite(&input, 3).unwrap());
        assert_eq!(out[0].flags, END_HEADERS | PRIORITY);
        assert_eq!(out[0].payload[..PRIORITY_LEN], priority);
        assert_eq!(authority(&decode_fresh(&out[0].payload[PRIORITY_LEN..])), b"localhost");
    }

    #[test]
    fn dynamic_table_references_across_requests_and_trailers_are_followed() {
        // Request 1 puts `:authority: tmp%2Fs.sock` (name index 1) and
        // `x-id: 7` in the client's dynamic table; request 2 refers to both
        // after the trailers add `grpc-timeout` (so at indexes 64 and 63),
        // as grpc-core does.
        let mut first = vec![0x41, 12];
        first.extend_from_slice(b"tmp%2Fs.sock");
        first.extend_from_slice(&[0x40, 4]);
        first.extend_from_slice(b"x-id");
        first.extend_from_slice(&[1, b'7']);
        first.extend_from_slice(&[0x83, 0x86]); // :method POST, :scheme http
        let trailers = encode(&mut Encoder::new(), &[(b"grpc-timeout", b"1S".to_vec())]);
        let second = vec![0xc0, 0xbf, 0x83, 0x86];
        let input = connection(&[
            frame(HEADERS, END_HEADERS, 1, &first),
            frame(HEADERS, END_HEADERS | END_STREAM, 1, &trailers),
            frame(HEADERS, END_HEADERS, 3, &second),
        ]);
        let out = frames(&rewrite(&input, 2).unwrap());
        for block in [&out[0], &out[2]] {
            let fields = decode_fresh(&block.payload);
            assert_eq!(authority(&fields), b"localhost");
            assert!(fields.contains(&(b"x-id".to_vec(), b"7".to_vec())));
        }
    }

    #[test]
    fn what_is_not_http2_passes_through() {
        let input = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(rewrite(input, 4).unwrap(), input);
    }

    #[test]
    fn malformed_streams_are_errors() {
        let block = encode(&mut Encoder::new(), &request(b"tmp%2Fs.sock"));
        let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
            ("continuation alone", vec![frame(CONTINUATION, END_HEADERS, 1, &block)]),
            ("data inside a block", vec![frame(HEADERS, 0, 1, &block), frame(0x0, 0, 1, b"x")]),
            ("headers inside a block", vec![frame(HEADERS, 0, 1, &block), frame(HEADERS, END_HEADERS, 3, &block)]),
            ("continuation on another stream", vec![frame(HEADERS, 0, 1, &block), frame(CONTINUATION, 0, 3, &block)]),
            ("index out of bounds", vec![frame(HEADERS, END_HEADERS, 1, &[0xff, 0x7f])]),
            ("truncated literal", vec![frame(HEADERS, END_HEADERS, 1, &[0x00, 0x05, b'a'])]),
            ("table size over 4096", vec![frame(HEADERS, END_HEADERS, 1, &[0x3f, 0xe2, 0x3f, 0x82])]),
            ("padding past the end", vec![frame(HEADERS, END_HEADERS | PADDED, 1, &[9, 0x82])]),
            ("no room for priority", vec![frame(HEADERS, END_HEADERS | PRIORITY, 1, &[0, 0])]),
            ("empty padded frame", vec![frame(HEADERS, END_HEADERS | PADDED, 1, &[])]),
        ];
        for (name, frames) in cases {
            assert!(rewrite(&connection(&frames), 3).is_err(), "{name}");
        }
        // A frame length over the cap fails at once, before its payload.
        let mut huge = PREFACE.to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, HEADERS, 0, 0, 0, 0, 1]);
        assert!(matches!(rewrite(&huge, 1), Err(AuthorityError::BlockTooLarge(_))));
    }

    #[test]
    fn a_block_over_the_cap_is_an_error() {
        let chunk = vec![0u8; MAX_FRAME_PAYLOAD];
        let mut frames = vec![frame(HEADERS, 0, 1, &chunk)];
        frames.extend((0..4).map(|_| frame(CONTINUATION, 0, 1, &chunk)));
        assert!(matches!(rewrite(&connection(&frames), 4096), Err(AuthorityError::BlockTooLarge(_))));
        // A small block that decodes to a huge list: one 4 KiB table entry
        // referenced over and over.
        let mut block = vec![0x40, 1, b'x', 0x7f, 0xa1, 0x1e];
        block.extend(std::iter::repeat_n(b'v', 4000));
        block.extend(std::iter::repeat_n(0xbe, 100));
        let input = connection(&[frame(HEADERS, END_HEADERS, 1, &block)]);
        assert!(matches!(rewrite(&input, 4096), Err(AuthorityError::ListTooLarge)));
    }

    #[test]
    fn random_bytes_never_panic() {
        // A small xorshift: deterministic, no dependency.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..2000 {
            let mut input = PREFACE.to_vec();
            let len = (next() % 300) as usize;
            for i in 0..len {
                // Bias frame heads toward HEADERS/CONTINUATION with small lengths.
                let byte = next() as u8;
                input.push(match i % 9 {
                    0 | 1 => 0,
                    2 => byte % 40,
                    3 => [HEADERS, CONTINUATION, 0][usize::from(byte % 3)],
                    _ => byte,
                });
            }
            let _ = feed_in_steps(&input, 1 + (next() % 50) as usize);
        }
    }

    #[tokio::test]
    async fn the_adapter_rewrites_reads_and_passes_writes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = AuthorityRewrite::new(server);
        let block = encode(&mut Encoder::new(), &request(b"tmp%2Fs.sock"));
        let input = connection(&[frame(HEADERS, END_HEADERS, 1, &block)]);
        let writer = tokio::spawn(async move {
            client.write_all(&input).await.unwrap();
            let mut reply = [0u8; 2];
            client.read_exact(&mut reply).await.unwrap();
            reply
        });
        let mut out = Vec::new();
        let mut buf = [0u8; 10];
        while out.len() < PREFACE.len() + FRAME_HEAD || out.len() < PREFACE.len() + FRAME_HEAD + frames_len(&out) {
            let n = server.read(&mut buf).await.unwrap();
            assert_ne!(n, 0);
            out.extend_from_slice(&buf[..n]);
        }
        assert_eq!(authority(&decode_fresh(&frames(&out)[0].payload)), b"localhost");
        server.write_all(b"ok").await.unwrap();
        assert_eq!(&writer.await.unwrap(), b"ok");
        // The client gone mid-frame: the server reads end of file.
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = AuthorityRewrite::new(server);
        client.write_all(&connection(&[frame(HEADERS, END_HEADERS, 1, &block)])[..40]).await.unwrap();
        drop(client);
        let mut all = Vec::new();
        server.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, PREFACE);
        // A valid first authority: the whole stream reads back as written.
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = AuthorityRewrite::new(server);
        let block = encode(&mut Encoder::new(), &request(b"localhost:1"));
        let data = frame(0x0, END_STREAM, 1, &[7; 300]);
        let input = connection(&[frame(HEADERS, END_HEADERS, 1, &block), data]);
        let written = input.clone();
        let writer = tokio::spawn(async move { client.write_all(&written).await.unwrap() });
        let mut all = Vec::new();
        server.read_to_end(&mut all).await.unwrap();
        writer.await.unwrap();
        assert_eq!(all, input);
        assert!(server.rewriter.passes_everything());
    }

    fn frames_len(out: &[u8]) -> usize {
        out.get(PREFACE.len()..PREFACE.len() + FRAME_HEAD)
            .and_then(|h| h.first_chunk())
            .map_or(0, |h| FrameHead::parse(h).len)
    }
}
