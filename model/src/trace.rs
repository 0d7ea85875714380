//! A run's trace: the W3C Trace Context (`traceparent`) a run joins, and the ids
//! derived from it, so that every span of a run (the server's step attempts, the
//! worker's steps, model and tool calls) lands in one OpenTelemetry trace.
//!
//! A run's trace comes from a `traceparent` given when it starts (on `StartRun`, or
//! on a webhook's HTTP request), else it is derived from the run's namespace and id:
//! the same run always has the same trace id, so a run stored before traces existed
//! gets the one it would have had.

use sha2::{Digest, Sha256};

/// The trace a run belongs to: its trace id, the span that started it (none: the
/// run's spans are the trace's roots) and the W3C trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// 16 bytes, never all zero.
    pub trace_id: [u8; 16],
    /// The caller's span the run started under; all zero: none.
    pub parent_span_id: [u8; 8],
    /// W3C trace flags (bit 0: sampled).
    pub flags: u8,
}

/// Why a `traceparent` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("traceparent {}: {reason}", crate::echo(.value))]
pub struct TraceparentError {
    value: String,
    reason: &'static str,
}

/// The longest `traceparent` read: version 00's 55 characters, and room for the
/// fields a later version may append.
pub const MAX_TRACEPARENT_LEN: usize = 512;

impl TraceContext {
    /// Parses a W3C `traceparent` header value
    /// (`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`). Versions after 00
    /// are read as 00 when they start the same way, as the specification asks.
    pub fn parse(value: &str) -> Result<Self, TraceparentError> {
        let fail = |reason| TraceparentError {
            value: value.to_string(),
            reason,
        };
        let v = value.trim();
        if v.len() > MAX_TRACEPARENT_LEN {
            return Err(fail("is too long"));
        }
        // Every slice below is at a byte offset: only ASCII may be cut there.
        if !v.is_ascii() {
            return Err(fail("is not ASCII"));
        }
        let b = v.as_bytes();
        if b.len() < 55 {
            return Err(fail("is too short (expected 00-<trace id>-<parent id>-<flags>)"));
        }
        let version = hex_bytes::<1>(&v[0..2])
            .ok_or_else(|| fail("has a version that is not 2 lowercase hex digits"))?;
        if version[0] == 0xff {
            return Err(fail("has the invalid version ff"));
        }
        if (version[0] == 0 && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
            return Err(fail("has trailing characters"));
        }
        if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return Err(fail("is not of the form 00-<trace id>-<parent id>-<flags>"));
        }
        let trace_id = hex_bytes::<16>(&v[3..35])
            .ok_or_else(|| fail("has a trace id that is not 32 lowercase hex digits"))?;
        let parent_span_id = hex_bytes::<8>(&v[36..52])
            .ok_or_else(|| fail("has a parent id that is not 16 lowercase hex digits"))?;
        let flags = hex_bytes::<1>(&v[53..55])
            .ok_or_else(|| fail("has flags that are not 2 lowercase hex digits"))?;
        if trace_id == [0; 16] {
            return Err(fail("has an all-zero trace id"));
        }
        if parent_span_id == [0; 8] {
            return Err(fail("has an all-zero parent id"));
        }
        Ok(Self {
            trace_id,
            parent_span_id,
            flags: flags[0] & 0x01,
        })
    }

    /// The trace of a run started without a `traceparent`: derived from its namespace
    /// and id, sampled, with no parent span.
    pub fn derived(namespace: &str, run_id: &str) -> Self {
        let d = digest(&[b"railyard-trace", namespace.as_bytes(), run_id.as_bytes()]);
        let mut trace_id = [0; 16];
        trace_id.copy_from_slice(&d[..16]);
        if trace_id == [0; 16] {
            trace_id[15] = 1;
        }
        Self {
            trace_id,
            parent_span_id: [0; 8],
            flags: 0x01,
        }
    }

    /// Whether this is the trace [`TraceContext::derived`] gives the run.
    pub fn is_derived(&self, namespace: &str, run_id: &str) -> bool {
        *self == Self::derived(namespace, run_id)
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    /// Whether the run was started under a caller's span.
    pub fn has_parent(&self) -> bool {
        self.parent_span_id != [0; 8]
    }

    /// The `traceparent` naming `span_id` in this trace, with this trace's flags.
    pub fn traceparent_for(&self, span_id: [u8; 8]) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(span_id),
            self.flags
        )
    }

    /// The `traceparent` the run was started with (`None`: the run's spans are roots).
    pub fn traceparent(&self) -> Option<String> {
        self.has_parent()
            .then(|| self.traceparent_for(self.parent_span_id))
    }

    /// The same trace, under the span `span_id` (a child run joins its parent's trace
    /// under the parent step's span).
    pub fn child_of(&self, span_id: [u8; 8]) -> Self {
        Self {
            parent_span_id: span_id,
            ..*self
        }
    }

    /// A span id standing for a run's step attempt (lease `lease_seq`) when no
    /// span was recorded for it: the same run and lease always give the same id.
    pub fn attempt_span_id(namespace: &str, run_id: &str, lease_seq: u64) -> [u8; 8] {
        let d = digest(&[
            b"railyard-attempt",
            namespace.as_bytes(),
            run_id.as_bytes(),
            &lease_seq.to_be_bytes(),
        ]);
        let mut id = [0; 8];
        id.copy_from_slice(&d[..8]);
        if id == [0; 8] {
            id[7] = 1;
        }
        id
    }
}

/// SHA-256 over length-prefixed parts, so that no two lists of parts collide.
fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    h.finalize().into()
}

/// `N` bytes from exactly `2N` lowercase hex digits.
fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        return None;
    }
    let mut out = [0; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIVEN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips() {
        let t = TraceContext::parse(GIVEN).unwrap();
        assert_eq!(t.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.traceparent().as_deref(), Some(GIVEN));
        assert!(t.has_parent());
        let later = format!("01-{}-extra", &GIVEN[3..]);
        assert_eq!(TraceContext::parse(&later).unwrap().trace_id, t.trace_id);
    }

    #[test]
    fn bad_traceparents_are_refused_by_what_is_wrong() {
        for (bad, why) in [
            ("", "too short"),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "all-zero trace id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "all-zero parent id",
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version ff",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                "trailing",
            ),
            ("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "form"),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz", "flags"),
        ] {
            let e = TraceContext::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("traceparent"), "{e}");
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(
            TraceContext::parse(&"0".repeat(600))
                .unwrap_err()
                .to_string()
                .contains("too long")
        );
        // Multi-byte characters where the fields are cut are refused, not a panic.
        let wide = format!("é{}", &GIVEN[1..]);
        assert!(
            TraceContext::parse(&wide)
                .unwrap_err()
                .to_string()
                .contains("not ASCII")
        );
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_parsed_or_refused_and_any_trace_round_trips(
            text in ".{0,80}",
            trace_id in proptest::array::uniform16(proptest::num::u8::ANY),
            span_id in proptest::array::uniform8(1u8..),
            flags in 0u8..2,
        ) {
            let _ = TraceContext::parse(&text);
            let near = format!("00-{}", &text);
            let _ = TraceContext::parse(&near);
            proptest::prop_assume!(trace_id != [0; 16]);
            let t = TraceContext { trace_id, parent_span_id: [0; 8], flags };
            let tp = t.traceparent_for(span_id);
            proptest::prop_assert_eq!(TraceContext::parse(&tp).unwrap(), t.child_of(span_id));
        }
    }

    #[test]
    fn a_derived_trace_is_stable_and_differs_per_run() {
        let a = TraceContext::derived("default", "run-1");
        assert_eq!(a, TraceContext::derived("default", "run-1"));
        assert_ne!(a.trace_id, TraceContext::derived("default", "run-2").trace_id);
        assert_ne!(a.trace_id, TraceContext::derived("other", "run-1").trace_id);
        assert!(!a.has_parent());
        assert_eq!(a.traceparent(), None);
        assert!(a.is_derived("default", "run-1"));
        let s = TraceContext::attempt_span_id("default", "run-1", 1);
        assert_ne!(s, TraceContext::attempt_span_id("default", "run-1", 2));
        let p = a.traceparent_for(s);
        assert_eq!(TraceContext::parse(&p).unwrap(), a.child_of(s));
    }
}
