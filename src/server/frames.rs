//! Following an HTTP/2 connection's frames across the reads and writes
//! that carry them, to tell what moved: the frames of an answer, request
//! body data, room the server made in the connection's flow-control window.
//!
//! Each direction of an HTTP/2 connection (after the client's preface) is a
//! plain sequence of frames, each a 9-byte header (a 24-bit payload length,
//! an 8-bit type, 8 bits of flags, a 31-bit stream id) and its payload (RFC
//! 9113 section 4.1). A read or a write may end anywhere in a frame;
//! [`Frames`] keeps the header it is in the middle of, and how much of the
//! payload is still to come, between them. Payloads are skipped, but for
//! the increment of a `WINDOW_UPDATE` on the connection.

/// What a client sends first on an HTTP/2 connection with prior knowledge
/// (RFC 9113 section 3.4), before its frames.
pub(super) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The window a connection opens with, in both directions (RFC 9113
/// section 6.9.2); only `WINDOW_UPDATE` frames on stream 0 widen it.
pub(super) const INITIAL_WINDOW: i64 = 65_535;

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

/// The flag of a `DATA` frame whose payload begins with the length of the
/// padding that ends it (RFC 9113 section 6.1).
const PADDED: u8 = 0x8;

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
    /// The increment of a `WINDOW_UPDATE` on the connection, as far as it
    /// has come (the first four bytes of its payload).
    increment: [u8; 4],
    /// How many bytes of `increment` have come.
    got: u8,
    /// The padding that ends a padded `DATA` frame under way, once its
    /// first payload byte has come.
    padding: u32,
}

/// What the bytes fed to [`Frames::follow`] carried.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// A byte of an answer's frames: `HEADERS`, `CONTINUATION`, or a
    /// `DATA` frame with a payload.
    pub(super) answer: bool,
    /// A byte of a request body: of a `DATA` frame's payload, not its
    /// header, the length of its padding or the padding itself. (Empty
    /// frames, or frames of padding alone, move no body forward.)
    pub(super) data: bool,
    /// The payload lengths of the `DATA` frames whose headers came whole:
    /// what they take from the connection's flow-control window, padding
    /// included.
    pub(super) data_length: u64,
    /// The increments of the `WINDOW_UPDATE` frames on the connection
    /// (stream 0) that came whole: what they add to its window.
    pub(super) window_increment: u64,
}

impl Frames {
    fn kind(&self) -> u8 {
        self.head[3]
    }

    fn length(&self) -> u32 {
        u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]])
    }

    fn on_connection(&self) -> bool {
        u32::from_be_bytes([self.head[5], self.head[6], self.head[7], self.head[8]]) & 0x7fff_ffff
            == 0
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

    /// Notes in `seen` whether `payload`, the next bytes of a `DATA`
    /// frame's payload, hold any of the body: padded, the payload is the
    /// padding's length, the body, then the padding.
    fn note_data(&mut self, payload: &[u8], seen: &mut Seen) {
        let length = self.length();
        let start = length - self.left;
        let (first, end) = if self.head[4] & PADDED == 0 {
            (0, length)
        } else {
            if start == 0 {
                self.padding = u32::from(payload[0]);
            }
            (1, length.saturating_sub(self.padding))
        };
        // At most `left`, a u32.
        let stop = start + payload.len() as u32;
        seen.data |= start.max(first) < stop.min(end);
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
                    self.got = 0;
                    if self.kind() == DATA {
                        seen.data_length += u64::from(self.left);
                    }
                    if self.left == 0 {
                        self.have = 0;
                    }
                }
                continue;
            }
            // At most `left`, a u32.
            let take = bytes.len().min(self.left as usize);
            self.note(seen);
            if self.kind() == DATA {
                self.note_data(&bytes[..take], seen);
            }
            if self.kind() == WINDOW_UPDATE && self.on_connection() && self.got < 4 {
                let got = usize::from(self.got);
                let more = (4 - got).min(take);
                self.increment[got..got + more].copy_from_slice(&bytes[..more]);
                self.got += more as u8;
                if self.got == 4 {
                    seen.window_increment +=
                        u64::from(u32::from_be_bytes(self.increment) & 0x7fff_ffff);
                }
            }
            self.left -= take as u32;
            bytes = &bytes[take..];
            if self.left == 0 {
                self.have = 0;
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A frame of `kind` on `stream` with `payload`.
    pub(in crate::server) fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
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
        assert!(rest.answer && rest.data);
        assert_eq!(rest.data_length, 0, "counted with its header");
    }

    #[test]
    fn data_lengths_and_connection_window_increments_add_up() {
        let bytes = [
            frame(0, 1, &[b'a'; 300]),
            frame(8, 0, &[0, 1, 0, 0]),
            frame(6, 0, b"pingpong"),
            frame(0, 3, &[b'b'; 16_384]),
            frame(8, 3, &[0, 0, 0, 9]),    // a stream's: not counted
            frame(8, 0, &[0x80, 0, 0, 1]), // the reserved bit ignored
            frame(0, 5, &[b'c'; 7]),
        ]
        .concat();
        let seen = seen(&bytes);
        assert_eq!(seen.data_length, 300 + 16_384 + 7);
        assert_eq!(seen.window_increment, 65_536 + 1);
        // Cut anywhere, the sum is the same.
        for cut in [1, 9, 10, 309, 312, 320, 5000] {
            let mut frames = Frames::default();
            let mut parts = Seen::default();
            frames.follow(&bytes[..cut], &mut parts);
            frames.follow(&bytes[cut..], &mut parts);
            assert_eq!(
                (parts.data_length, parts.window_increment),
                (seen.data_length, seen.window_increment),
                "cut at {cut}"
            );
        }
    }

    /// A `DATA` frame of `payload` padded with `padding` bytes.
    fn padded(stream: u32, payload: &[u8], padding: u8) -> Vec<u8> {
        let mut body = vec![padding];
        body.extend_from_slice(payload);
        body.extend(std::iter::repeat_n(0, usize::from(padding)));
        let mut frame = frame(0, stream, &body);
        frame[4] = PADDED;
        frame
    }

    #[test]
    fn only_a_data_frames_body_bytes_are_data() {
        assert!(seen(&padded(1, b"hi", 5)).data);
        assert!(seen(&frame(0, 1, b"x")).data);
        let padding_alone = padded(1, b"", 200);
        let seen_padding = seen(&padding_alone);
        assert!(!seen_padding.data);
        assert_eq!(
            seen_padding.data_length, 201,
            "padding takes from the window"
        );
        // The body bytes of a padded frame, cut between the reads anywhere:
        // only the reads that carry one of them see data.
        let frame = padded(1, b"abc", 4);
        for cut in 0..frame.len() {
            let mut frames = Frames::default();
            let (mut before, mut after) = (Seen::default(), Seen::default());
            frames.follow(&frame[..cut], &mut before);
            frames.follow(&frame[cut..], &mut after);
            // The header is 9 bytes, the padding's length 1: the body is
            // bytes 10, 11 and 12.
            assert_eq!(
                (before.data, after.data),
                (cut > 10, cut < 13),
                "cut at {cut}"
            );
        }
    }
}
