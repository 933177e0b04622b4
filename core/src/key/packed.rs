//! An owned key and note packed into one shared allocation.

use super::{KeyRef, ObjectRef, SeriesKey};
use std::fmt;
use std::sync::Arc;

/// Number of string fields in a key: six for regarding, six for related, five scalars, the namespace;
/// then the note.
const FIELDS: usize = 19;

/// An owned [`SeriesKey`] and the note of its first occurrence, packed into one shared allocation: a
/// series keeps them as long as it lives, and nineteen separate `String`s would cost more in headers
/// than most keys hold in text. The format is [`encode`]'s; cloning shares it.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyBuf(Arc<[u8]>);

const RELATED: u8 = 1;
const WIDE: u8 = 2;

/// Packs a key and note into `out` (appended): one flags byte (bit 0: `related` is set; bit 1: wide
/// offsets), the end offset of each field as a little-endian `u16` (`u32` when the text is longer
/// than 64 KiB), then the fields' text back to back. [`PackedKey`] reads it back.
pub fn encode<S: AsRef<str>>(key: &SeriesKey<S>, note: &str, out: &mut Vec<u8>) {
    let mut parts: [&str; FIELDS] = [""; FIELDS];
    parts[..6].copy_from_slice(&key.regarding.parts());
    if let Some(r) = &key.related {
        parts[6..12].copy_from_slice(&r.parts());
    }
    parts[12..].copy_from_slice(&[
        key.action.as_ref(),
        key.reason.as_ref(),
        key.reporting_controller.as_ref(),
        key.reporting_instance.as_ref(),
        key.type_.as_ref(),
        key.namespace.as_ref(),
        note,
    ]);
    let text: usize = parts.iter().map(|p| p.len()).sum();
    let wide = text > usize::from(u16::MAX);
    let width = if wide { 4 } else { 2 };
    out.reserve(1 + width * FIELDS + text);
    out.push(u8::from(key.related.is_some()) * RELATED + u8::from(wide) * WIDE);
    let mut end = 0u32;
    for part in parts {
        end = end.saturating_add(u32::try_from(part.len()).unwrap_or(u32::MAX));
        if wide {
            out.extend_from_slice(&end.to_le_bytes());
        } else {
            // `text` fits in a u16, so every end does.
            out.extend_from_slice(&(end as u16).to_le_bytes());
        }
    }
    for part in parts {
        out.extend_from_slice(part.as_bytes());
    }
}

impl KeyBuf {
    pub fn new<S: AsRef<str>>(key: &SeriesKey<S>, note: &str) -> KeyBuf {
        let mut buf = Vec::new();
        encode(key, note, &mut buf);
        KeyBuf(Arc::from(buf))
    }

    /// A copy of a packed key (as [`encode`] wrote it).
    pub fn from_packed(key: PackedKey<'_>) -> KeyBuf {
        KeyBuf(Arc::from(key.0))
    }

    pub fn packed(&self) -> PackedKey<'_> {
        PackedKey(&self.0)
    }

    /// The key as borrowed strings, for hashing and for writing the series object.
    pub fn view(&self) -> KeyRef<'_> {
        self.packed().view()
    }

    /// The note (message) of the series' first occurrence.
    pub fn note(&self) -> &str {
        self.packed().note()
    }

    /// Heap bytes of text the key and note carry.
    pub fn text_len(&self) -> usize {
        self.packed().text_len()
    }
}

/// A key and note in [`encode`]'s format, borrowed from wherever they are stored. Reading a malformed
/// one yields empty fields, never a panic.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PackedKey<'a>(pub &'a [u8]);

impl<'a> PackedKey<'a> {
    pub fn bytes(self) -> &'a [u8] {
        self.0
    }

    fn flags(self) -> u8 {
        self.0.first().copied().unwrap_or_default()
    }

    fn width(self) -> usize {
        if self.flags() & WIDE != 0 { 4 } else { 2 }
    }

    fn header(self) -> usize {
        1 + self.width() * FIELDS
    }

    fn end(self, i: usize) -> usize {
        let w = self.width();
        match self.0.get(1 + w * i..1 + w * (i + 1)) {
            Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
            Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]) as usize,
            _ => 0,
        }
    }

    fn field(self, i: usize) -> &'a str {
        let start = if i == 0 { 0 } else { self.end(i - 1) };
        let header = self.header();
        self.0
            .get(header + start..header + self.end(i))
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }

    fn object(self, at: usize) -> ObjectRef<&'a str> {
        ObjectRef {
            api_version: self.field(at),
            kind: self.field(at + 1),
            namespace: self.field(at + 2),
            name: self.field(at + 3),
            uid: self.field(at + 4),
            field_path: self.field(at + 5),
        }
    }

    pub fn view(self) -> KeyRef<'a> {
        SeriesKey {
            regarding: self.object(0),
            related: (self.flags() & RELATED != 0).then(|| self.object(6)),
            action: self.field(12),
            reason: self.field(13),
            reporting_controller: self.field(14),
            reporting_instance: self.field(15),
            type_: self.field(16),
            namespace: self.field(17),
        }
    }

    pub fn note(self) -> &'a str {
        self.field(18)
    }

    pub fn text_len(self) -> usize {
        self.0.len().saturating_sub(self.header())
    }
}

impl fmt::Debug for KeyBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.packed().fmt(f)
    }
}

impl fmt::Debug for PackedKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyBuf")
            .field("key", &self.view())
            .field("note", &self.note())
            .finish()
    }
}
