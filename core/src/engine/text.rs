use alloc::string::String;
use alloc::vec::Vec;

/// Token bytes in, whole UTF-8 characters out.
///
/// A token's piece need not be valid UTF-8 on its own: SentencePiece byte-fallback
/// tokens (`<0xE2>`) carry one byte each, and a multi-byte character can be split across
/// tokens. The stream holds back an incomplete character until its last byte arrives;
/// bytes that can never become a character come out as U+FFFD, as
/// `String::from_utf8_lossy` would write them.
#[derive(Debug, Default, Clone)]
pub struct TextStream {
    /// At most 3 bytes: the start of a character still waiting for its end.
    held: Vec<u8>,
    /// What the last `push` released.
    out: String,
}

impl TextStream {
    /// An empty stream, with room for any token's piece: pushing allocates only for a
    /// piece longer than 256 bytes.
    pub fn new() -> TextStream {
        TextStream { held: Vec::with_capacity(256 + 3), out: String::with_capacity(256 * 3) }
    }

    /// Adds `bytes`; returns the characters they complete (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> &str {
        self.out.clear();
        self.held.extend_from_slice(bytes);
        let mut rest = &self.held[..];
        loop {
            match core::str::from_utf8(rest) {
                Ok(s) => {
                    self.out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is what from_utf8 just accepted
                    self.out.push_str(core::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            self.out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        // a character cut short by the end of the bytes so far: wait
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let keep = self.held.len() - rest.len();
        self.held.drain(..keep);
        &self.out
    }

    /// What the last `push` released.
    pub fn released(&self) -> &str {
        &self.out
    }

    /// Ends the stream: an incomplete character left over comes out as U+FFFD.
    pub fn finish(&mut self) -> &str {
        self.out.clear();
        if !self.held.is_empty() {
            self.out.push(char::REPLACEMENT_CHARACTER);
            self.held.clear();
        }
        &self.out
    }
}
