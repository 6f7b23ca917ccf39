//! Following an HTTP/2 connection's frames across the writes that carry
//! them, to tell which carried an answer.
//!
//! Each direction of an HTTP/2 connection (after the client's preface) is a
//! plain sequence of frames, each a 9-byte header (a 24-bit payload length,
//! an 8-bit type, 8 bits of flags, a 31-bit stream id) and its payload (RFC
//! 9113 section 4.1). A read or a write may end anywhere in a frame;
//! [`Frames`] keeps the header it is in the middle of, and how much of the
//! payload is still to come, between them. Payloads are skipped.

/// What a client sends first on an HTTP/2 connection with prior knowledge
/// (RFC 9113 section 3.4), before its frames.
pub(super) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const CONTINUATION: u8 = 9;

/// One direction of a connection's frames, followed through the bytes fed
/// to it in order.
#[derive(Default)]
pub(super) struct Frames {
    /// The header of the frame under way, as far as it has come.
    head: [u8; 9],
    /// How many bytes of `head` have come; 9 once it is whole and the
    /// payload is under way.
    have: u8,
    /// The bytes of the payload still to come.
    left: u32,
}

/// What the bytes fed to [`Frames::follow`] carried.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// A byte of an answer's frames: `HEADERS`, `CONTINUATION`, or a
    /// `DATA` frame with a payload.
    pub(super) answer: bool,
}

impl Frames {
    fn kind(&self) -> u8 {
        self.head[3]
    }

    fn length(&self) -> u32 {
        u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]])
    }

    /// Notes in `seen` what a byte of the frame under way carries, once
    /// its type has come.
    fn note(&self, seen: &mut Seen) {
        if self.have > 3 {
            match self.kind() {
                HEADERS | CONTINUATION => seen.answer = true,
                DATA => seen.answer |= self.length() > 0,
                _ => {}
            }
        }
    }

    /// Follows `bytes`, the next ones of this direction, noting in `seen`
    /// what they carried.
    pub(super) fn follow(&mut self, mut bytes: &[u8], seen: &mut Seen) {
        while !bytes.is_empty() {
            if self.have < 9 {
                let have = usize::from(self.have);
                let take = (9 - have).min(bytes.len());
                self.head[have..have + take].copy_from_slice(&bytes[..take]);
                // At most 9.
                self.have += take as u8;
                bytes = &bytes[take..];
                self.note(seen);
                if self.have == 9 {
                    self.left = self.length();
                    if self.left == 0 {
                        self.have = 0;
                    }
                }
                continue;
            }
            // At most `left`, a u32.
            let take = bytes.len().min(self.left as usize);
            self.note(seen);
            self.left -= take as u32;
            bytes = &bytes[take..];
            if self.left == 0 {
                self.have = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of `kind` on `stream` with `payload`.
    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut frame = vec![length[1], length[2], length[3], kind, 0];
        frame.extend_from_slice(&stream.to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    }

    /// What `bytes` carried, fed at once and fed a byte at a time (which
    /// must agree).
    fn seen(bytes: &[u8]) -> Seen {
        let mut whole = Seen::default();
        Frames::default().follow(bytes, &mut whole);
        let mut frames = Frames::default();
        let mut bytewise = Seen::default();
        for byte in bytes {
            frames.follow(std::slice::from_ref(byte), &mut bytewise);
        }
        assert_eq!(whole, bytewise);
        whole
    }

    #[test]
    fn control_frames_carry_no_answer() {
        let control = [
            frame(4, 0, &[]),           // SETTINGS ACK
            frame(6, 0, b"pingpong"),   // PING ACK
            frame(8, 1, &[0, 0, 1, 0]), // WINDOW_UPDATE on a stream
            frame(3, 1, &[0, 0, 0, 8]), // RST_STREAM
            frame(7, 0, &[0; 8]),       // GOAWAY
            frame(0, 1, &[]),           // an empty DATA, ending a stream
        ]
        .concat();
        assert_eq!(seen(&control), Seen::default());
    }

    #[test]
    fn headers_continuation_and_data_carry_an_answer() {
        for answer in [
            frame(1, 1, b"\x88"),
            frame(9, 1, b"\x88"),
            frame(0, 1, b"hi"),
        ] {
            assert!(seen(&answer).answer, "{answer:?}");
        }
        // The payload alone, the header gone out in an earlier write.
        let data = frame(0, 3, &[b'x'; 100]);
        let mut frames = Frames::default();
        frames.follow(&data[..20], &mut Seen::default());
        let mut rest = Seen::default();
        frames.follow(&data[20..], &mut rest);
        assert!(rest.answer);
    }
}
