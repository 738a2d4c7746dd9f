//! Formatting for people: relative times, durations, aligned tables,
//! colours, and escaping of text that came from a client or a downstream
//! (a task's url, error or result must not be able to move the cursor or
//! recolour the terminal). Pure functions: the time is passed in.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// How far `then` lies from `now` in its largest whole unit: `3s ago`,
/// `5m ago`, `2h ago` (up to two days), `4d ago`; `in 10s` for a time ahead.
pub(crate) fn relative(then: SystemTime, now: SystemTime) -> String {
    match now.duration_since(then) {
        Ok(past) => format!("{} ago", span(past)),
        Err(ahead) => format!("in {}", span(ahead.duration())),
    }
}

fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m", s / 60),
        3_600..172_800 => format!("{}h", s / 3_600),
        _ => format!("{}d", s / 86_400),
    }
}

/// [`relative`] of an RFC 3339 time as the API writes it; the text itself
/// if it does not parse.
pub(crate) fn relative_rfc3339(time: &str, now: SystemTime) -> String {
    match humantime::parse_rfc3339(time) {
        Ok(then) => relative(then, now),
        Err(_) => sanitize(time),
    }
}

/// The time of day of an RFC 3339 time (`03:04:05.678`, UTC as the API
/// writes it); the text itself if it is not of that shape.
pub(crate) fn clock(time: &str) -> String {
    match (time.get(10..11), time.get(11..23)) {
        (Some("T"), Some(hms)) if humantime::parse_rfc3339(time).is_ok() => hms.to_owned(),
        _ => sanitize(time),
    }
}

/// A duration in milliseconds, short: `130ms`, `2.5s`, `3m05s`.
pub(crate) fn millis(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
    }
}

/// Text safe to print: control characters (escape, carriage return, line
/// feed, …) and the Unicode bidirectional overrides written as escapes.
pub(crate) fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// `c`, or its escape if it is a control character or a bidirectional
/// override.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c.is_control() || is_bidi_control(c) => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
        c => out.push(c),
    }
}

/// Bytes made safe for a terminal, line by line as they are: line feeds
/// and tabs stay, every other control character (escape, bell, carriage
/// return, C1 controls, delete) and the bidirectional overrides become
/// escapes as in [`sanitize`], and a byte that is not UTF-8 becomes `\xNN`.
/// What a downstream sent cannot then set the clipboard (OSC 52), retitle
/// the window or overwrite what was printed.
pub(crate) fn sanitize_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' | '\t' => out.push(c),
                c => push_escaped(&mut out, c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// At most `max` characters of `text`, `…` marking a cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A colour (or none) for a piece of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// As it is.
    Plain,
    /// Bold (headers).
    Bold,
    /// Success.
    Green,
    /// Failure.
    Red,
    /// Canceled, held.
    Yellow,
    /// In progress.
    Cyan,
}

impl Style {
    fn code(self) -> Option<&'static str> {
        match self {
            Style::Plain => None,
            Style::Bold => Some("1"),
            Style::Green => Some("32"),
            Style::Red => Some("31"),
            Style::Yellow => Some("33"),
            Style::Cyan => Some("36"),
        }
    }
}

/// `text` in `style` when `colour`, else as it is.
pub(crate) fn paint(text: &str, style: Style, colour: bool) -> String {
    match style.code() {
        Some(code) if colour => format!("\x1b[{code}m{text}\x1b[0m"),
        _ => text.to_owned(),
    }
}

/// The colour of a task state.
pub(crate) fn state_style(state: &str) -> Style {
    match state {
        "success" => Style::Green,
        "failed" => Style::Red,
        "canceled" => Style::Yellow,
        "running" => Style::Cyan,
        _ => Style::Plain,
    }
}

/// A task state from the server, made safe to print and coloured by what
/// it means when `colour`.
pub(crate) fn paint_state(state: &str, colour: bool) -> String {
    paint(&sanitize(state), state_style(state), colour)
}

/// Colours only for a terminal, and never with `NO_COLOR` set to anything
/// but the empty string (<https://no-color.org>).
pub(crate) fn wants_colour(stdout_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// One table cell: text made safe to print, and its style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cell {
    text: String,
    style: Style,
}

impl Cell {
    /// A plain cell.
    pub(crate) fn new(text: &str) -> Cell {
        Cell::styled(text, Style::Plain)
    }

    /// A cell in `style`.
    pub(crate) fn styled(text: &str, style: Style) -> Cell {
        Cell {
            text: sanitize(text),
            style,
        }
    }

    fn width(&self) -> usize {
        self.text.chars().count()
    }
}

/// Columns aligned on their widest cell, two spaces apart. A table rendered
/// in several parts (one page at a time) prints its header once and keeps
/// its columns at least as wide as before, so later parts line up.
#[derive(Debug)]
pub(crate) struct Table {
    header: Option<Vec<Cell>>,
    widths: Vec<usize>,
}

impl Table {
    /// A table with a header row.
    pub(crate) fn new(header: &[&str]) -> Table {
        Table {
            header: Some(
                header
                    .iter()
                    .map(|h| Cell::styled(h, Style::Bold))
                    .collect(),
            ),
            widths: header.iter().map(|h| h.chars().count()).collect(),
        }
    }

    /// A table without a header (label and value pairs).
    pub(crate) fn plain() -> Table {
        Table {
            header: None,
            widths: Vec::new(),
        }
    }

    /// The rows as lines (the header first, on the first call), each line
    /// ending with `\n`.
    pub(crate) fn render(&mut self, rows: &[Vec<Cell>], colour: bool) -> String {
        let header = self.header.take();
        for row in header.iter().chain(rows) {
            for (i, cell) in row.iter().enumerate() {
                match self.widths.get_mut(i) {
                    Some(w) => *w = (*w).max(cell.width()),
                    None => self.widths.push(cell.width()),
                }
            }
        }
        let mut out = String::new();
        for row in header.iter().chain(rows) {
            self.render_row(&mut out, row, colour);
        }
        out
    }

    fn render_row(&self, out: &mut String, row: &[Cell], colour: bool) {
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(&paint(&cell.text, cell.style, colour));
            // No padding after the last cell: no trailing spaces.
            if i + 1 < row.len() {
                let width = self.widths.get(i).copied().unwrap_or(0);
                out.extend(std::iter::repeat_n(' ', width.saturating_sub(cell.width())));
            }
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn relative_times_use_the_largest_whole_unit() {
        let now = at(1_000_000);
        let check = |then: SystemTime, expected: &str| {
            assert_eq!(relative(then, now), expected);
        };
        check(now, "0s ago");
        check(at(1_000_000 - 3), "3s ago");
        check(at(1_000_000 - 59), "59s ago");
        check(at(1_000_000 - 60), "1m ago");
        check(at(1_000_000 - 3_599), "59m ago");
        check(at(1_000_000 - 3_600), "1h ago");
        check(at(1_000_000 - 47 * 3_600), "47h ago");
        check(at(1_000_000 - 48 * 3_600), "2d ago");
        check(at(1_000_000 + 10), "in 10s");
        check(at(1_000_000 + 7_200), "in 2h");
        check(now - Duration::from_millis(999), "0s ago");
    }

    #[test]
    fn rfc3339_times_are_read_as_the_api_writes_them() {
        let now = humantime::parse_rfc3339("2026-01-02T03:04:10Z").unwrap();
        let check = |time: &str, expected: &str| {
            assert_eq!(relative_rfc3339(time, now), expected, "{time}");
        };
        check("2026-01-02T03:04:05.678Z", "4s ago");
        check("2026-01-02T02:04:10.000Z", "1h ago");
        check("2026-01-03T03:04:10.000Z", "in 24h");
        check("yesterday\x1b[31m", "yesterday\\u{1b}[31m");
        assert_eq!(clock("2026-01-02T03:04:05.678Z"), "03:04:05.678");
        assert_eq!(clock("03:04"), "03:04");
    }

    #[test]
    fn durations_are_short() {
        let check = |ms: u64, expected: &str| assert_eq!(millis(ms), expected, "{ms}");
        check(0, "0ms");
        check(130, "130ms");
        check(999, "999ms");
        check(1_000, "1.0s");
        check(2_549, "2.5s");
        check(59_999, "60.0s");
        check(60_000, "1m00s");
        check(185_000, "3m05s");
    }

    #[test]
    fn control_characters_are_escaped() {
        let check = |text: &str, expected: &str| assert_eq!(sanitize(text), expected, "{text:?}");
        check("plain text, ünïcode", "plain text, ünïcode");
        check("a\nb\tc\rd", "a\\nb\\tc\\rd");
        check("\x1b[2J", "\\u{1b}[2J");
        check("\u{7}bell", "\\u{7}bell");
        check("abc\u{202e}def", "abc\\u{202e}def");
    }

    #[test]
    fn bytes_for_a_terminal_keep_lines_and_escape_the_rest() {
        let check = |bytes: &[u8], expected: &str| {
            assert_eq!(sanitize_bytes(bytes), expected, "{bytes:?}");
        };
        check(b"", "");
        check(
            "plain\ttext,\nünïcode\n".as_bytes(),
            "plain\ttext,\nünïcode\n",
        );
        // OSC 52 (set the clipboard), ended by BEL or by ST.
        check(b"\x1b]52;c;aGk=\x07", "\\u{1b}]52;c;aGk=\\u{7}");
        check(b"\x1b]52;c;aGk=\x1b\\", "\\u{1b}]52;c;aGk=\\u{1b}\\");
        check(b"over\rwrite", "over\\rwrite");
        check(b"del\x7f", "del\\u{7f}");
        // C1 controls (CSI as one code point) and a bidi override.
        check("\u{9b}31m".as_bytes(), "\\u{9b}31m");
        check("a\u{202e}b".as_bytes(), "a\\u{202e}b");
        // Bytes that are not UTF-8, alone and in the middle of a sequence.
        check(&[0xff, 0x00, b'b'], "\\xff\\u{0}b");
        check(&[b'a', 0xe2, 0x82, b'z'], "a\\xe2\\x82z");
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("exactly10!", 10), "exactly10!");
        assert_eq!(truncate("longer than ten", 10), "longer th…");
        assert_eq!(truncate("ééééé", 3), "éé…");
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        let check = |terminal: bool, no_color: Option<&str>, expected: bool| {
            assert_eq!(
                wants_colour(terminal, no_color.map(OsStr::new)),
                expected,
                "{terminal} {no_color:?}"
            );
        };
        check(true, None, true);
        check(true, Some(""), true);
        check(true, Some("1"), false);
        check(false, None, false);
        check(false, Some("1"), false);
        assert_eq!(paint("ok", Style::Green, true), "\x1b[32mok\x1b[0m");
        assert_eq!(paint("ok", Style::Green, false), "ok");
        assert_eq!(paint("ok", Style::Plain, true), "ok");
    }

    #[test]
    fn tables_align_on_the_widest_cell() {
        let mut table = Table::new(&["ID", "STATE", "ERROR"]);
        let rows = vec![
            vec![Cell::new("a"), Cell::new("pending"), Cell::new("-")],
            vec![
                Cell::new("bbbb"),
                Cell::new("failed"),
                Cell::new("http_503"),
            ],
        ];
        assert_eq!(
            table.render(&rows, false),
            "ID    STATE    ERROR\n\
             a     pending  -\n\
             bbbb  failed   http_503\n"
        );
        // A later part keeps the widths, grows where it must, and has no
        // header.
        let more = vec![vec![Cell::new("cc"), Cell::new("x"), Cell::new("e")]];
        assert_eq!(table.render(&more, false), "cc    x        e\n");
        let wide = vec![vec![Cell::new("dddddd"), Cell::new("y"), Cell::new("z")]];
        assert_eq!(table.render(&wide, false), "dddddd  y        z\n");
    }

    #[test]
    fn tables_count_characters_not_bytes_and_colour_after_padding() {
        let mut table = Table::plain();
        let rows = vec![
            vec![Cell::new("é"), Cell::styled("ok", Style::Green)],
            vec![Cell::new("abc"), Cell::new("x")],
        ];
        assert_eq!(table.render(&rows, false), "é    ok\nabc  x\n");
        let mut table = Table::plain();
        let rows = vec![vec![Cell::styled("s", Style::Red), Cell::new("v")]];
        assert_eq!(table.render(&rows, true), "\x1b[31ms\x1b[0m  v\n");
        // Cells are escaped: a value cannot inject a terminal sequence.
        let mut table = Table::plain();
        let rows = vec![vec![Cell::new("\x1b[31m")]];
        assert_eq!(table.render(&rows, true), "\\u{1b}[31m\n");
    }
}
