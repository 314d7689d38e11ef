//! Text cut to size for failure values: the start of an error body, the end
//! of a stderr stream (where the error usually is).

use std::collections::VecDeque;

/// The first `max` bytes of `text` (at a character boundary), `…` if cut.
pub(crate) fn head(text: &str, max: usize) -> String {
    match tether_turn::cut(text, max) {
        (cut, true) => format!("{cut}…"),
        (whole, false) => whole,
    }
}

/// The last bytes of a stream, at most `max`: what a process wrote last.
#[derive(Debug)]
pub(crate) struct Tail {
    bytes: VecDeque<u8>,
    max: usize,
    dropped: bool,
}

impl Tail {
    /// An empty tail keeping at most `max` bytes.
    pub(crate) fn new(max: usize) -> Tail {
        Tail { bytes: VecDeque::with_capacity(max.min(4096)), max, dropped: false }
    }

    /// Appends `chunk`, forgetting the oldest bytes past `max`.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        while self.bytes.len() > self.max {
            self.bytes.pop_front();
            self.dropped = true;
        }
    }

    /// The kept bytes as text, trimmed, `…` first if older bytes were forgotten.
    pub(crate) fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let joined = [a, b].concat();
        let text = String::from_utf8_lossy(&joined);
        let text = text.trim();
        if self.dropped { format!("…{}", text.trim_start_matches('\u{FFFD}')) } else { text.to_owned() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_the_last_bytes() {
        let mut tail = Tail::new(5);
        tail.push(b"abc");
        assert_eq!(tail.text(), "abc");
        tail.push(b"defg\n");
        assert_eq!(tail.text(), "…defg");
        assert_eq!(head("abcdef", 3), "abc…");
        assert_eq!(head("ab", 3), "ab");
    }
}
