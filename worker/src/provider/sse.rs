//! A small, bounded Server-Sent Events parser for the providers' streaming answers.
//!
//! It follows the event-stream grammar of the HTML standard (lines ending in CRLF, LF
//! or CR; `field: value`; comments starting with `:`; an empty line dispatches the
//! event) for the two fields model APIs use, `event` and `data`; `id` and `retry` mean
//! nothing to a one-shot POST and are ignored. Unlike the general-purpose crates it
//! holds at most one line and one event of a caller-chosen size, so a peer that never
//! ends a line cannot grow the worker.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event` field ("" when the event gave none: the default "message").
    pub event: String,
    /// The `data` lines, joined with `\n`.
    pub data: String,
}

/// A line or an event passed the parser's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLong {
    pub limit: usize,
}

/// Feeds on the body's bytes in whatever pieces they come, and yields whole events.
pub(crate) struct SseParser {
    /// The line being read (without its ending).
    line: Vec<u8>,
    /// The last byte seen was a CR: an LF right after it ends nothing more.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    /// Longest line, and longest event data, held.
    limit: usize,
}

impl SseParser {
    /// A parser holding at most `limit` bytes of one line and of one event's data.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            limit,
        }
    }

    /// Parses `bytes`, appending every event they complete to `events`.
    pub(crate) fn feed(&mut self, bytes: &[u8], events: &mut Vec<SseEvent>) -> Result<(), TooLong> {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr && rest[0] == b'\n' {
                rest = &rest[1..];
                self.after_cr = false;
                continue;
            }
            self.after_cr = false;
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.push_line_bytes(&rest[..end])?;
                    self.after_cr = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    self.end_line(events)?;
                }
                None => {
                    self.push_line_bytes(rest)?;
                    rest = &[];
                }
            }
        }
        Ok(())
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) -> Result<(), TooLong> {
        if self.line.len() + bytes.len() > self.limit {
            return Err(TooLong { limit: self.limit });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) -> Result<(), TooLong> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if self.has_data {
                events.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // a comment (keep-alives are sent as these)
        }
        let text = String::from_utf8_lossy(&line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                let extra = value.len() + usize::from(self.has_data);
                if self.data.len() + extra > self.limit {
                    return Err(TooLong { limit: self.limit });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {} // id, retry and unknown fields
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut p = SseParser::new(1 << 10);
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            p.feed(chunk, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn events_in_any_pieces_and_line_endings() {
        let input = b": keep-alive\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\nevent: ping\ndata: {}\n\ndata:x\rdata: y\r\rid: 7\nretry: 10\n\nevent: lonely\n\n";
        let want = vec![
            SseEvent {
                event: "message_start".into(),
                data: "{\"a\":1}".into(),
            },
            SseEvent {
                event: "ping".into(),
                data: "{}".into(),
            },
            SseEvent {
                event: String::new(),
                data: "x\ny".into(),
            },
        ];
        for piece in 1..=input.len() {
            assert_eq!(parse_in_pieces(input, piece), want, "pieces of {piece} bytes");
        }
        // An event not ended by an empty line is not dispatched.
        assert!(parse_in_pieces(b"data: cut", 4).is_empty());
    }

    #[test]
    fn lines_and_events_are_bounded() {
        let mut p = SseParser::new(16);
        let mut out = Vec::new();
        // A line that never ends is refused once past the limit, however it arrives.
        p.feed(b"data: 0123456789", &mut out).unwrap();
        assert_eq!(p.feed(b"x", &mut out), Err(TooLong { limit: 16 }));
        // Many short data lines cannot build an event past it either.
        let mut p = SseParser::new(16);
        let err = p.feed(b"data: 01234\ndata: 56789\ndata: abcde\n", &mut out);
        assert_eq!(err, Err(TooLong { limit: 16 }));
        assert!(out.is_empty());
    }
}
