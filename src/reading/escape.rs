//! Text a tenant wrote, made safe for a human's screen: the reader's terminal, and the chat or
//! pager an alert is rendered in.

use super::invisible::INVISIBLE;

/// Text from an object as it may reach a terminal: anything a tenant wrote into an Event, which
/// the API server checks for length, never for characters. Control characters would run in the
/// reader's terminal (clear or forge the screen, retitle the window, write the clipboard through
/// OSC 52) and bidirectional, invisible or format characters would reorder or hide what is shown
/// (tag characters carry a whole hidden text), so each is written visibly instead: C0 controls
/// and DEL in caret notation (`^[`, `^?`), every other one as `\u{..}`. Which ones: the table in
/// [`super::invisible`], generated from the Unicode data. `-o json|yaml` keep the exact values.
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
            _ if hidden(c) => push_code(&mut out, c),
            _ => out.push(c),
        }
    }
    out
}

/// Text from an object as it goes into an alert's annotations, which receivers' templates print
/// into Slack's mrkdwn, Markdown or HTML: like [`visible`], every invisible character as `\u{..}`
/// (controls included: caret notation would itself hold `[`, `]` or `\`), and every ASCII
/// character that is markup in one of them ([`MARKUP`]) replaced by its fullwidth look-alike
/// (`<` by `＜`, `|` by `｜`), so that `<!channel>`, `<https://x|Fix>`, `[Fix](https://x)` or
/// `@everyone` read as what they are and do nothing. At most `max_chars` characters come out,
/// never half an escape.
pub fn inert(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    let mut chars = 0;
    for c in text.chars() {
        let before = out.len();
        if hidden(c) {
            push_code(&mut out, c);
        } else if MARKUP.contains(c) {
            out.push(fullwidth(c));
        } else {
            out.push(c);
        }
        chars += out[before..].chars().count();
        if chars > max_chars {
            out.truncate(before);
            break;
        }
    }
    out
}

/// ASCII characters that start or end markup in Slack's mrkdwn (`<!here>`, `<url|text>`, `*bold*`,
/// `_italic_`, `~strike~`, `` `code` ``, `&amp;`), Markdown (`[text](url)`, `# heading`, `\`
/// escapes) or HTML (`<a>`, `&lt;`), or mention everyone in a chat that reads plain `@everyone`.
/// The `\` of tenant text is replaced too, so every `\u{..}` in an annotation is an escape.
pub const MARKUP: &str = "<>&|`*_~[]#@\\";

/// The fullwidth form of a printable ASCII character (U+FF01 to U+FF5E).
fn fullwidth(c: char) -> char {
    char::from_u32(c as u32 + 0xfee0).unwrap_or('\u{fffd}')
}

fn push_code(out: &mut String, c: char) {
    use std::fmt::Write;
    let _ = write!(out, "\\u{{{:x}}}", c as u32);
}

/// A character that must not reach a reader as itself: in [`INVISIBLE`].
fn hidden(c: char) -> bool {
    let n = c as u32;
    if n < 0x80 {
        return n < 0x20 || n == 0x7f;
    }
    INVISIBLE
        .binary_search_by(|&(lo, hi)| {
            if hi < n {
                std::cmp::Ordering::Less
            } else if lo > n {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_characters_variation_selectors_and_format_characters_are_shown() {
        // "ok" followed by the tag-character spelling of "AB" and a cancel tag: invisible text.
        assert_eq!(
            visible("ok\u{e0041}\u{e0042}\u{e007f}"),
            "ok\\u{e0041}\\u{e0042}\\u{e007f}"
        );
        assert_eq!(visible("a\u{fe0f}b\u{e0100}"), "a\\u{fe0f}b\\u{e0100}");
        for c in [
            '\u{600}',
            '\u{110bd}',
            '\u{13430}',
            '\u{1d173}',
            '\u{2066}',
            '\u{34f}',
        ] {
            assert_eq!(visible(&c.to_string()), format!("\\u{{{:x}}}", c as u32));
        }
        // Hangul fillers render as blanks: default-ignorable.
        assert_eq!(visible("\u{3164}"), "\\u{3164}");
        assert_eq!(visible("naïve 日本 ✓"), "naïve 日本 ✓");
    }

    #[test]
    fn alert_text_is_inert_in_slack_markdown_and_html() {
        assert_eq!(inert("<!channel>", 100), "＜!channel＞");
        assert_eq!(inert("<https://x|Fix>", 100), "＜https://x｜Fix＞");
        assert_eq!(inert("[Fix](https://x)", 100), "［Fix］(https://x)");
        assert_eq!(
            inert("*a* _b_ ~c~ `d` &amp; #h @here", 100),
            "＊a＊ ＿b＿ ～c～ ｀d｀ ＆amp; ＃h ＠here"
        );
        assert_eq!(inert("BackOff web-0.1", 100), "BackOff web-0.1");
        // Controls as codes, never caret notation (`^[` would open a link text).
        assert_eq!(inert("\u{1b}x\u{1d}(u)", 100), "\\u{1b}x\\u{1d}(u)");
        assert_eq!(inert("a\u{e0041}", 100), "a\\u{e0041}");
        // A tenant's own `\u{..}` cannot pass for an escape.
        assert_eq!(inert("\\u{1b}", 100), "＼u{1b}");
        for c in MARKUP.chars() {
            let out = inert(&c.to_string(), 10);
            assert!(!out.contains(c) && out.chars().count() == 1, "{c}: {out}");
        }
    }

    #[test]
    fn inert_text_is_cut_between_escapes() {
        assert_eq!(inert("abcdef", 3), "abc");
        assert_eq!(inert("ab\u{e0041}", 5), "ab");
        assert_eq!(inert("ab\u{e0041}c", 11), "ab\\u{e0041}");
        assert_eq!(inert("<<<<", 2), "＜＜");
    }

    /// Every code point that is a control (Cc), a format character (Cf), a line or paragraph
    /// separator (Zl, Zp), default-ignorable or a variation selector, as inclusive ranges, by
    /// the Unicode data compiled into `icu_properties`.
    fn from_unicode_data() -> Vec<(u32, u32)> {
        use icu_properties::props::{
            DefaultIgnorableCodePoint, GeneralCategory as Gc, VariationSelector,
        };
        use icu_properties::{CodePointMapData, CodePointSetData};
        let gc = CodePointMapData::<Gc>::new();
        let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
        let selector = CodePointSetData::new::<VariationSelector>();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for n in 0..=0x10_ffff_u32 {
            let invisible = matches!(
                gc.get32(n),
                Gc::Control | Gc::Format | Gc::LineSeparator | Gc::ParagraphSeparator
            ) || ignorable.contains32(n)
                || selector.contains32(n);
            match ranges.last_mut() {
                Some((_, hi)) if invisible && *hi + 1 == n => *hi = n,
                _ if invisible => ranges.push((n, n)),
                _ => {}
            }
        }
        ranges
    }

    fn render(ranges: &[(u32, u32)]) -> String {
        let mut out = String::from(
            "// GENERATED by `EVENT_SERIES_REGENERATE=1 cargo test --lib invisible_table`\n\
             // (src/reading/escape.rs) from the Unicode data compiled into the `icu_properties` crate:\n\
             // General_Category Cc, Cf, Zl and Zp, Default_Ignorable_Code_Point and\n\
             // Variation_Selector. Do not edit; that test fails when this is not what the data says.\n\
             \n\
             //! The characters `event-series get` and the alerts write as `\\u{..}` (or in caret\n\
             //! notation), never as themselves: sorted, disjoint, inclusive ranges of code points.\n\
             \n\
             #[rustfmt::skip]\n\
             pub const INVISIBLE: &[(u32, u32)] = &[\n",
        );
        for (lo, hi) in ranges {
            out.push_str(&format!("    (0x{lo:04X}, 0x{hi:04X}),\n"));
        }
        out.push_str("];\n");
        out
    }

    #[test]
    fn invisible_table_is_what_the_unicode_data_says() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/reading/invisible.rs");
        let fresh = render(&from_unicode_data());
        if std::env::var_os("EVENT_SERIES_REGENERATE").is_some() {
            std::fs::write(path, &fresh).expect("write the table");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == fresh,
            "{path} is not what the Unicode data says (a newer icu_properties?): regenerate it with \
             EVENT_SERIES_REGENERATE=1 cargo test --lib invisible_table"
        );
        assert_eq!(INVISIBLE.len(), from_unicode_data().len());
        for c in [
            '\u{e0041}',
            '\u{fe0f}',
            '\u{200d}',
            '\u{2028}',
            '\u{85}',
            '\u{ad}',
        ] {
            assert!(hidden(c), "{c:?}");
        }
        for c in ['a', ' ', 'é', '日', '\u{a0}', '\u{3000}', '\u{1f600}'] {
            assert!(!hidden(c), "{c:?}");
        }
    }
}
