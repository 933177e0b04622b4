//! How many objects to ask for in the next page of a list, so that one response stays near a
//! byte budget and arrives within the request deadline.
//!
//! The API bounds a page by count (`limit`), not by size, and a core/v1 Event has no size limit
//! short of etcd's (about 1.5 MB): 500 Events carrying 1 MB messages make a 500 MB response. What
//! a page costs in memory does not depend on this: pages are read one object at a time
//! ([`crate::input::list_body`]). But a count sized by small objects may meet large ones (one small
//! Event sorted before hundreds of 1.4 MB ones), and such a response may not arrive within the
//! request deadline. So a list starts with a small page, measures the largest object it got, and
//! sizes the next page to fit the budget, up to the maximum (`limit` may change between the pages
//! of one list); a page that failed is measured too, so that it is asked for again smaller. Pure:
//! the shells measure and ask.

use serde::Serialize;

/// The first page of a list, before any object was measured: one object, since one is all a page
/// of 1 MB objects may hold; the next page grows to the maximum at once if objects are small.
const FIRST: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSize {
    max: u32,
    budget: usize,
    next: u32,
}

impl PageSize {
    /// At most `max` objects and about `budget` bytes (of JSON) per page.
    pub fn new(max: u32, budget: usize) -> PageSize {
        let max = max.max(1);
        PageSize {
            max,
            budget: budget.max(1),
            next: FIRST.min(max),
        }
    }

    /// The `limit` of the next page.
    pub fn limit(&self) -> u32 {
        self.next
    }

    /// A page arrived whose largest object took `largest` bytes: the next holds as many objects of
    /// that size as fit the budget (at least one, at most the maximum).
    pub fn measured(&mut self, largest: usize) {
        let fit = self.budget / largest.max(1);
        self.next = u32::try_from(fit).unwrap_or(u32::MAX).clamp(1, self.max);
    }

    /// A new list begins: sizes are unknown again.
    pub fn restart(&mut self) {
        self.next = FIRST.min(self.max);
    }
}

/// The size of an object as JSON, counted without building the JSON.
pub fn json_size(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Counting cannot fail; a value that cannot be serialised counts what was written.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The largest object of a page, as JSON.
pub fn largest<T: Serialize>(items: &[T]) -> usize {
    items.iter().map(json_size).max().unwrap_or(0)
}

/// A byte count that is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a size such as 4Mi, 512Ki or 1048576")]
pub struct BadSize(String);

/// Parses a byte count (a flag's value): a number, optionally followed by `Ki`, `Mi` or `Gi`.
pub fn parse_bytes(text: &str) -> Result<usize, BadSize> {
    let t = text.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err(BadSize(text.to_owned())),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .filter(|n| *n >= 1)
        .ok_or_else(|| BadSize(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_of_large_objects_shrink_to_the_budget_and_small_ones_grow_back() {
        let mut p = PageSize::new(500, 4 << 20);
        assert_eq!(p.limit(), 1, "a list starts with one object");
        p.measured(1 << 20);
        assert_eq!(p.limit(), 4, "four 1 MiB objects fit 4 MiB");
        p.measured(3 << 20);
        assert_eq!(p.limit(), 1);
        p.measured(10 << 20);
        assert_eq!(p.limit(), 1, "never 0");
        p.measured(1_000);
        assert_eq!(p.limit(), 500, "at most the maximum");
        p.measured(0);
        assert_eq!(p.limit(), 500);
        p.restart();
        assert_eq!(p.limit(), 1);
        assert_eq!(PageSize::new(3, 1).limit(), 1);
        assert_eq!(PageSize::new(0, 0).limit(), 1);
    }

    #[test]
    fn json_size_is_the_length_of_the_json() {
        let v = serde_json::json!({"message": "x".repeat(1000), "n": 12});
        assert_eq!(
            json_size(&v),
            serde_json::to_vec(&v).map(|b| b.len()).unwrap_or(0)
        );
        assert_eq!(largest::<serde_json::Value>(&[]), 0);
    }

    #[test]
    fn byte_counts_parse_with_binary_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_bytes("4Mi"), Ok(4 << 20));
        assert_eq!(parse_bytes("512Ki"), Ok(512 << 10));
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        for bad in ["", "0", "4M", "4 Mi", "-1", "99999999999999999999Gi", "Mi"] {
            let e = parse_bytes(bad).unwrap_err().to_string();
            assert!(e.contains("is not a size"), "{e}");
        }
    }
}
