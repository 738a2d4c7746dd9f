//! W3C trace context (<https://www.w3.org/TR/trace-context/>) as a task keeps
//! it: the trace a task belongs to, the span its calls descend from, and the
//! caller's `tracestate`, stored with the task and sent on every try.
//!
//! The rules live here once: what a valid `traceparent` and `tracestate`
//! are (an invalid one is ignored, never an error: tracing must not refuse
//! work), the text forms sent and stored, and a new trace's ids, from
//! randomness the caller gives (this crate reads no entropy).

use std::fmt;

/// The most bytes of `tracestate` kept (the specification's 512).
pub const MAX_TRACESTATE_BYTES: usize = 512;
/// The most list members of `tracestate` (the specification's 32).
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A task's trace context: its trace id, the id of the span its calls are
/// children of, the trace flags, and the caller's `tracestate`, if any.
/// One that exists is valid (non-zero ids, a well-formed `tracestate`).
#[derive(Clone, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
    state: Option<String>,
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceContext")
            .field("traceparent", &self.traceparent())
            .field("tracestate", &self.state)
            .finish()
    }
}

impl TraceContext {
    /// The context a request's `traceparent` and `tracestate` headers carry,
    /// or `None` when `traceparent` is missing or not valid (then
    /// `tracestate` is ignored too, as the specification says). A
    /// `tracestate` that is not valid is dropped alone.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let (trace_id, parent_id, flags) = parse_traceparent(traceparent?.trim())?;
        Some(TraceContext {
            trace_id,
            parent_id,
            flags,
            state: tracestate.and_then(parse_tracestate),
        })
    }

    /// A new trace: trace id from the first 16 bytes of `random`, parent id
    /// from the last 8 (a zero id, vanishingly rare, becomes 1). Marked
    /// sampled, so a downstream that samples by its parent records it.
    pub fn new_root(random: [u8; 24]) -> Self {
        let mut trace_id = [0u8; 16];
        trace_id.copy_from_slice(&random[..16]);
        let mut parent_id = [0u8; 8];
        parent_id.copy_from_slice(&random[16..]);
        if trace_id == [0; 16] {
            trace_id[15] = 1;
        }
        if parent_id == [0; 8] {
            parent_id[7] = 1;
        }
        TraceContext {
            trace_id,
            parent_id,
            flags: 1,
            state: None,
        }
    }

    /// The same trace, state and flags under another parent span (the span
    /// of ours the task's calls descend from). `None` for a zero span id.
    pub fn with_parent(&self, span_id: [u8; 8], sampled: bool) -> Option<Self> {
        if span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id: self.trace_id,
            parent_id: span_id,
            flags: (self.flags & !1) | u8::from(sampled),
            state: self.state.clone(),
        })
    }

    /// The trace id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The trace id as 32 lower-case hex digits (what a view and a log
    /// line show).
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The id of the span the task's calls are children of.
    pub fn parent_id(&self) -> [u8; 8] {
        self.parent_id
    }

    /// The trace flags (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Whether the caller marked the trace sampled.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The caller's `tracestate`, as given (trimmed).
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }

    /// The `traceparent` header naming the stored parent.
    pub fn traceparent(&self) -> String {
        self.traceparent_for(self.parent_id)
    }

    /// The `traceparent` header of a child of this context whose span is
    /// `span_id` (an attempt's own span).
    pub fn traceparent_for(&self, span_id: [u8; 8]) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&span_id),
            self.flags
        )
    }

    /// The one text form the stores keep: the `traceparent`, then a line
    /// with the `tracestate` when there is one.
    pub fn to_stored(&self) -> String {
        match &self.state {
            Some(state) => format!("{}\n{state}", self.traceparent()),
            None => self.traceparent(),
        }
    }

    /// The context [`TraceContext::to_stored`] wrote; `None` for text it
    /// never writes.
    pub fn from_stored(text: &str) -> Option<Self> {
        let (parent, state) = match text.split_once('\n') {
            Some((parent, state)) => (parent, Some(state)),
            None => (text, None),
        };
        let context = TraceContext::from_headers(Some(parent), state)?;
        (context.to_stored() == text).then_some(context)
    }
}

/// `version-traceid-parentid-flags`: version 00 exactly 55 bytes; a later
/// version (not `ff`) may add fields after a `-`, which are ignored.
fn parse_traceparent(text: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let bytes = text.as_bytes();
    if bytes.len() < 55 {
        return None;
    }
    let version = from_hex::<1>(&text[..2])?[0];
    if version == 0xff || (version == 0 && bytes.len() != 55) {
        return None;
    }
    if bytes.len() > 55 && bytes[55] != b'-' {
        return None;
    }
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return None;
    }
    let trace_id = from_hex::<16>(&text[3..35])?;
    let parent_id = from_hex::<8>(&text[36..52])?;
    let flags = from_hex::<1>(&text[53..55])?[0];
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some((trace_id, parent_id, flags))
}

/// A `tracestate` kept as given (trimmed) when every list member is
/// `key=value` by the specification's grammar, there are at most 32 of
/// them and 512 bytes in all; `None` otherwise or when it is empty.
fn parse_tracestate(text: &str) -> Option<String> {
    let text = text.trim_matches([' ', '\t']);
    if text.is_empty() || text.len() > MAX_TRACESTATE_BYTES {
        return None;
    }
    let mut members = 0;
    for member in text.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        members += 1;
        let (key, value) = member.split_once('=')?;
        if members > MAX_TRACESTATE_MEMBERS || !valid_key(key) || !valid_value(value) {
            return None;
        }
    }
    (members > 0).then(|| text.to_owned())
}

/// `simple-key` or `tenant-id@system-id`, lower-case letters, digits and
/// `_-*/`, starting with a letter or digit.
fn valid_key(key: &str) -> bool {
    let part = |s: &str, max: usize| {
        let b = s.as_bytes();
        !b.is_empty()
            && b.len() <= max
            && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/".contains(c))
    };
    match key.split_once('@') {
        Some((tenant, system)) => part(tenant, 241) && part(system, 14),
        None => part(key, 256),
    }
}

/// 1 to 256 printable ASCII characters but `,` and `=`, not ending in a space.
fn valid_value(value: &str) -> bool {
    let b = value.as_bytes();
    !b.is_empty()
        && b.len() <= 256
        && b.last() != Some(&b' ')
        && b.iter()
            .all(|c| (0x20..=0x7e).contains(c) && *c != b',' && *c != b'=')
}

fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let b = text.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn check(traceparent: &str, tracestate: Option<&str>, expected: Option<(&str, Option<&str>)>) {
        let got = TraceContext::from_headers(Some(traceparent), tracestate);
        let got = got.as_ref().map(|c| (c.traceparent(), c.state()));
        let expected = expected.map(|(p, s)| (p.to_owned(), s));
        assert_eq!(got, expected, "{traceparent:?} {tracestate:?}");
    }

    #[test]
    fn traceparent_is_kept_when_valid_and_ignored_otherwise() {
        check(PARENT, None, Some((PARENT, None)));
        check(&format!("  {PARENT} "), None, Some((PARENT, None)));
        check(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            None,
            Some((
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
                None,
            )),
        );
        // A later version may carry more fields; they are not ours to keep.
        check(
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            None,
            Some((PARENT, None)),
        );
        for bad in [
            "",
            "garbage",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
        ] {
            check(bad, Some("a=b"), None);
        }
    }

    #[test]
    fn tracestate_is_kept_when_valid_and_dropped_alone_otherwise() {
        check(
            PARENT,
            Some("congo=t61rcWkgMzE"),
            Some((PARENT, Some("congo=t61rcWkgMzE"))),
        );
        check(
            PARENT,
            Some(" rojo=00f067aa0ba902b7, congo=t61rcWkgMzE "),
            Some((PARENT, Some("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"))),
        );
        check(
            PARENT,
            Some("fw529a3039@dt=x"),
            Some((PARENT, Some("fw529a3039@dt=x"))),
        );
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        let long = format!("a={}", "x".repeat(600));
        for bad in [
            "", " ", "novalue", "Upper=x", "a=b=c", "a=", "a=x,y", "a=\u{7f}", &many, &long,
        ] {
            check(PARENT, Some(bad), Some((PARENT, None)));
        }
    }

    #[test]
    fn the_stored_form_reads_back_and_nothing_else_does() {
        let with_state = TraceContext::from_headers(Some(PARENT), Some("a=1,b=2")).expect("valid");
        let without = TraceContext::from_headers(Some(PARENT), None).expect("valid");
        for context in [&with_state, &without] {
            assert_eq!(
                TraceContext::from_stored(&context.to_stored()).as_ref(),
                Some(context)
            );
        }
        for bad in ["", "x", &format!("{PARENT}\n"), &format!("{PARENT}\nBAD")] {
            assert_eq!(TraceContext::from_stored(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_child_keeps_the_trace_and_names_its_span() {
        let context = TraceContext::from_headers(Some(PARENT), Some("a=1")).expect("valid");
        assert_eq!(
            context.traceparent_for([1, 2, 3, 4, 5, 6, 7, 8]),
            "00-0af7651916cd43dd8448eb211c80319c-0102030405060708-01"
        );
        let child = context.with_parent([9; 8], false).expect("non-zero");
        assert_eq!(child.trace_id(), context.trace_id());
        assert_eq!(child.state(), Some("a=1"));
        assert!(!child.sampled());
        assert_eq!(context.with_parent([0; 8], true), None);
        assert_eq!(context.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
    }

    #[test]
    fn a_new_root_has_non_zero_ids_and_is_sampled() {
        let root = TraceContext::new_root([0; 24]);
        assert_ne!(root.trace_id(), [0; 16]);
        assert_ne!(root.parent_id(), [0; 8]);
        assert!(root.sampled());
        let mut random = [0u8; 24];
        random[0] = 0xab;
        random[23] = 0xcd;
        let root = TraceContext::new_root(random);
        assert_eq!(
            root.traceparent(),
            "00-ab000000000000000000000000000000-00000000000000cd-01"
        );
    }
}
