//! serde's error messages made fit to show: without the values they
//! quote, and with control characters escaped. A value in the wrong
//! place may be a secret (`headers = "Bearer …"` in a configuration file,
//! a token of the wrong type in a JSON body), and a key may carry
//! terminal escapes or newlines. Used for configuration files
//! ([`crate::toml_file`]) and the JSON bodies of the control plane's
//! console API.
//!
//! A value of the wrong type is named by its kind (`invalid type: a
//! string, expected a map`), an unknown variant by nothing
//! (`unknown variant, expected `stdio` or `http``); a number out of range
//! where a number is expected, and a boolean, are shown.

/// `message` (serde's words) without the values it quotes (see the
/// module docs).
pub fn without_values(message: &str) -> String {
    for kind in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(kind)
            && let Some((found, expected)) = rest.split_once(", expected ")
        {
            // A number where a number is expected is no secret, nor is a
            // boolean; anything else is described, not shown.
            let numeric = found.starts_with("integer ") || found.starts_with("floating point ");
            let shown = if (kind == "invalid value: " && numeric) || found.starts_with("boolean ") {
                found.to_owned()
            } else {
                describe(found)
            };
            return format!("{kind}{shown}, expected {expected}");
        }
    }
    if let Some(rest) = message.strip_prefix("unknown variant `")
        && let Some((_, expected)) = rest.split_once("`, expected ")
    {
        return format!("unknown variant, expected {expected}");
    }
    message.to_owned()
}

/// serde's rendering of an unexpected value (`string "x"`, `integer `5``)
/// as its kind only.
fn describe(found: &str) -> String {
    const KINDS: [(&str, &str); 5] = [
        ("string ", "a string"),
        ("integer ", "an integer"),
        ("floating point ", "a floating point number"),
        ("character ", "a character"),
        ("byte array", "a byte array"),
    ];
    KINDS
        .iter()
        .find(|(prefix, _)| found.starts_with(prefix))
        .map_or_else(|| found.to_owned(), |(_, kind)| (*kind).to_owned())
}

/// Whether `c` changes the direction text is shown in (Unicode's bidi
/// controls: U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069):
/// a name or value holding one can show its characters in another order
/// than they are ("Trojan Source"), so it is escaped like a control
/// character where text reaches a terminal or a message.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with its control characters (newlines, escapes) and bidi
/// controls ([`is_bidi_control`]) written as `\u{..}`.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || is_bidi_control(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}
