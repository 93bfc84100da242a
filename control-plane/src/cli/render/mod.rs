//! How the CLI prints what the control plane returns: [`cards`] (one
//! record over several lines: interactions, background call events),
//! [`tables`] (lists, one aligned line per record) and [`json`] (the
//! `--json` shapes, kept in `crate::api::json` for the console too). Here: the `out!` macro every command prints stdout
//! with, so that output to a closed pipe (`switchyard tools | head -1`)
//! ends the command quietly, and pretty-printed JSON.

pub mod cards;
/// The `--json` shapes (shared with the admin console).
pub use crate::api::json;
pub mod tables;

use serde_json::Value;

/// Prints a line to stdout; a closed pipe ends the process quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = writeln!(stdout, $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}
pub(crate) use out;

/// Prints `v` as pretty JSON (two-space indent), then a newline.
pub fn print_json(v: &Value) {
    out!("{}", serde_json::to_string_pretty(v).expect("serialises"));
}

/// Prints each line of a card or a table, [`printable`].
pub fn print_lines(lines: impl IntoIterator<Item = String>) {
    for line in lines {
        out!("{}", printable(&line));
    }
}

/// `text` safe for a terminal: control characters other than newline and
/// tab (escape sequences a server put in a name, a message, a URI) and
/// bidi controls (U+202E shows what follows reversed:
/// [`switchyard_common::serde_errors::is_bidi_control`]) are shown as
/// `\u{..}` instead of being sent to the terminal.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || switchyard_common::serde_errors::is_bidi_control(c)
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A list of records: with `json`, `{"<key>": [...]}` (each record as
/// `to_json` shapes it) pretty-printed; else the table `table` makes.
pub fn print_list<T>(
    json: bool,
    key: &str,
    items: &[T],
    to_json: fn(&T) -> Value,
    table: fn(&[T]) -> Vec<String>,
) {
    if json {
        let list = items.iter().map(to_json).collect();
        print_json(&Value::Object(
            [(key.to_owned(), Value::Array(list))].into_iter().collect(),
        ));
    } else {
        print_lines(table(items));
    }
}

pub use crate::api::json::parse_json_text;

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::printable("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            super::printable("evil\u{1b}[2Jname\u{7}\u{9b}"),
            "evil\\u{1b}[2Jname\\u{7}\\u{9b}"
        );
        // Bidi controls: `txt.exe` would show as `exe.txt`.
        assert_eq!(
            super::printable("a\u{202e}txt.exe\u{2066}"),
            "a\\u{202e}txt.exe\\u{2066}"
        );
        assert_eq!(
            switchyard_common::serde_errors::escape_controls("k\u{202e}v"),
            "k\\u{202e}v"
        );
    }
}
