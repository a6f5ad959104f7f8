//! Text from the cluster shown to people: what a caller wrote (a refused write's target, a
//! reason) reaches tables, terminals and the dashboard, so its control characters are shown
//! as escapes. A newline in an environment name must not print a second, forged row in
//! `hubctl audit`, and an escape sequence must not reach a terminal.

use std::borrow::Cow;

/// `text` with every control character (C0, DEL, C1) and every bidirectional-formatting
/// character, and the line and paragraph separators, shown as its Rust escape (`\n`, `\t`, `\u{1b}`, `\u{202e}`); other text,
/// backslashes included, is unchanged. Borrowed when there is nothing to escape.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Control characters, the line and paragraph separators, and the characters that reorder
/// the text around them on screen (an override can make a row read as something it is not).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped_and_nothing_else() {
        assert!(matches!(
            escape_controls("prod/web: ok é \\ \"q\""),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_controls("x\noperator/admin DeleteEnvironment\r\t\u{1b}[31m\u{7f}\u{85}"),
            "x\\noperator/admin DeleteEnvironment\\r\\t\\u{1b}[31m\\u{7f}\\u{85}"
        );
        assert_eq!(
            escape_controls("a\u{202e}b\u{2066}"),
            "a\\u{202e}b\\u{2066}"
        );
        // Nothing escaped prints a line break.
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        assert!(!escape_controls(&all).contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']));
    }
}
