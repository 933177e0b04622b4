//! Text a tenant wrote, made safe for a human's screen: the reader's terminal, and the chat or
//! pager an alert is rendered in.

/// Text from an object as it may reach a terminal: anything a tenant wrote into an Event, which
/// the API server checks for length, never for characters. Control characters would run in the
/// reader's terminal (clear or forge the screen, retitle the window, write the clipboard through
/// OSC 52) and bidirectional or invisible format characters would reorder or hide what is shown,
/// so each is written visibly instead: C0 controls and DEL in caret notation (`^[`, `^?`), C1
/// controls and format characters as `\u{..}`. `-o json|yaml` keep the exact values.
pub fn visible(text: &str) -> String {
    if !text.chars().any(hidden) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c as u32 {
            n @ 0x00..=0x1f => {
                out.push('^');
                out.push(char::from(b'@' + n as u8));
            }
            0x7f => out.push_str("^?"),
            _ if hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

/// A character that must not reach a terminal as itself.
fn hidden(c: char) -> bool {
    matches!(c as u32,
        0x00..=0x1f | 0x7f..=0x9f // C0, DEL, C1
        | 0xad // soft hyphen
        | 0x061c // Arabic letter mark
        | 0x180e // Mongolian vowel separator
        | 0x200b..=0x200f // zero-width spaces and joiners, LRM, RLM
        | 0x2028..=0x202e // line and paragraph separators, bidi embeddings and overrides
        | 0x2060..=0x206f // word joiner, invisible operators, bidi isolates
        | 0xfeff // zero-width no-break space
        | 0xfff9..=0xfffb // interlinear annotations
    )
}
