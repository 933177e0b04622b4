//! A list response read as it arrives, one item at a time.
//!
//! The API bounds a list page by count (`limit`), never by size, and a tenant decides the size of
//! its Events (up to etcd's 1.5 MB each): a page that a small object before it made large can hold
//! hundreds of MB. kube's `Api::list` reads the whole body, then decodes all of it, so such a page
//! costs the operator twice its size at once. Here the body is split into its items while it
//! streams ([`Splitter`], pure), and each item is decoded (and cut, by the caller) before the next
//! is read: what a page holds in memory is one object, whatever the page holds on the wire.
//!
//! The API server writes a list as `{"kind", "apiVersion", "metadata", "items": [...]}`; the
//! metadata (resourceVersion, continue token) is read both before the items ([`Part::Head`]) and at
//! the end ([`Part::End`]), so nothing depends on that order.

use futures::stream::BoxStream;
use futures::{AsyncBufReadExt, Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Client;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

/// What a list body is made of, in the order it arrives.
#[derive(Debug, PartialEq)]
pub enum Part<T> {
    /// The list's metadata as far as it came before the items.
    Head(ListMeta),
    /// One item, and the bytes of its JSON.
    Item(Box<T>, usize),
    /// The list's metadata, once the whole body was read.
    End(ListMeta),
}

/// Splits a JSON list object into the values of its top-level `items` array and the rest, from
/// chunks of any size. Pure; it validates only what it needs to split (the item is decoded by
/// serde, the rest at the end).
#[derive(Debug, Default)]
pub struct Splitter {
    /// Nesting depth of objects and arrays; the list object itself is depth 1.
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1: the last string read, which a `:` makes the key of the value that follows.
    string: Vec<u8>,
    key: Vec<u8>,
    /// Inside the top-level `items` array.
    in_items: bool,
    /// The bytes of the item being read.
    item: Vec<u8>,
    /// Everything but the items (an empty array in their place).
    rest: Vec<u8>,
    /// [`Split::Head`] was handed out.
    headed: bool,
}

/// A piece of the body as [`Splitter`] finds it.
#[derive(Debug, PartialEq, Eq)]
pub enum Split {
    /// The list object up to its items, closed, as JSON.
    Head(Vec<u8>),
    Item(Vec<u8>),
}

impl Splitter {
    /// Reads `chunk`, handing each complete item (and the head, once) to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut impl FnMut(Split)) {
        let mut rest = chunk;
        while let Some((&b, after)) = rest.split_first() {
            // Within an item only quotes, escapes and brackets matter: copy the bytes between at once.
            if self.in_items && self.depth >= 3 && !self.escaped {
                let plain = match self.in_string {
                    true => rest.iter().position(|c| matches!(c, b'"' | b'\\')),
                    false => rest
                        .iter()
                        .position(|c| matches!(c, b'"' | b'{' | b'}' | b'[' | b']')),
                }
                .unwrap_or(rest.len());
                if plain > 0 {
                    self.item.extend_from_slice(&rest[..plain]);
                    rest = &rest[plain..];
                    continue;
                }
            }
            self.byte(b, out);
            rest = after;
        }
    }

    fn byte(&mut self, b: u8, out: &mut impl FnMut(Split)) {
        let item = self.in_items && self.depth >= 3;
        if item {
            self.item.push(b);
        } else if !(self.in_items && self.depth == 2 && b != b']') {
            self.rest.push(b);
        }
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                (false, _) => {}
            }
            if self.depth == 1 && self.in_string {
                self.string.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 {
                    self.string.clear();
                }
            }
            b':' if self.depth == 1 => self.key = std::mem::take(&mut self.string),
            b'{' | b'[' => self.open(b, out),
            b'}' | b']' => self.close(out),
            _ => {}
        }
    }

    fn open(&mut self, b: u8, out: &mut impl FnMut(Split)) {
        self.depth += 1;
        if self.depth == 2 && b == b'[' && self.key == b"items" {
            self.in_items = true;
            if !self.headed {
                self.headed = true;
                let mut head = self.rest.clone();
                head.extend_from_slice(b"]}");
                out(Split::Head(head));
            }
        } else if self.in_items && self.depth == 3 {
            self.item.clear();
            self.item.push(b);
        }
    }

    fn close(&mut self, out: &mut impl FnMut(Split)) {
        self.depth = self.depth.saturating_sub(1);
        if self.in_items && self.depth == 2 {
            out(Split::Item(std::mem::take(&mut self.item)));
        } else if self.in_items && self.depth == 1 {
            self.in_items = false;
        }
    }

    /// The list without its items, once the body is complete: `None` when it was not one whole
    /// JSON object.
    pub fn finish(self) -> Option<Vec<u8>> {
        (self.depth == 0 && !self.in_string && !self.rest.is_empty()).then_some(self.rest)
    }
}

/// The metadata of a list object (all of it but its items).
fn list_meta(json: &[u8]) -> Result<ListMeta, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Skeleton {
        #[serde(default)]
        metadata: ListMeta,
    }
    serde_json::from_slice::<Skeleton>(json).map(|s| s.metadata)
}

/// A body that is not a list.
#[derive(Debug, thiserror::Error)]
#[error("the list response is not a JSON list: {0}")]
pub struct NotAList(String);

fn decode_error(e: impl std::fmt::Display) -> kube::Error {
    kube::Error::Service(Box::new(NotAList(e.to_string())))
}

/// One page of the list `api` makes with `params`, read as it arrives ([`parts`]).
pub fn page<K>(api: &Api<K>, params: &ListParams) -> BoxStream<'static, kube::Result<Part<K>>>
where
    K: kube::Resource + Clone + DeserializeOwned + Send + 'static,
{
    match kube::core::Request::new(api.resource_url()).list(params) {
        Ok(mut request) => {
            request.extensions_mut().insert("list");
            parts(api.clone().into_client(), request).boxed()
        }
        Err(e) => futures::stream::iter([Err(kube::Error::BuildRequest(e))]).boxed(),
    }
}

/// Sends `request` (a list) and reads its answer as it arrives: a stream of the list's head, each
/// item as `T`, then its end. An error (the request's or the body's) ends the stream; what was
/// handed out before it stays valid, and the caller asks for the same page again.
pub fn parts<T: DeserializeOwned + Send + 'static>(
    client: Client,
    request: http::Request<Vec<u8>>,
) -> impl Stream<Item = kube::Result<Part<T>>> + Send {
    futures::stream::once(async move { client.request_stream(request).await })
        .map(|opened| match opened {
            Ok(body) => futures::future::Either::Left(read(body)),
            Err(e) => futures::future::Either::Right(futures::stream::iter([Err(e)])),
        })
        .flatten()
}

/// The parts of a list body.
fn read<T: DeserializeOwned + Send + 'static>(
    body: impl futures::AsyncBufRead + Send + Unpin + 'static,
) -> impl Stream<Item = kube::Result<Part<T>>> + Send {
    struct Reading<R> {
        body: R,
        splitter: Splitter,
        ready: std::collections::VecDeque<Split>,
        done: bool,
    }
    let start = Reading {
        body,
        splitter: Splitter::default(),
        ready: std::collections::VecDeque::new(),
        done: false,
    };
    futures::stream::unfold(start, |mut r| async move {
        loop {
            if let Some(split) = r.ready.pop_front() {
                let part = match split {
                    Split::Head(json) => list_meta(&json).map(Part::Head),
                    Split::Item(json) => {
                        serde_json::from_slice(&json).map(|t| Part::Item(Box::new(t), json.len()))
                    }
                };
                return Some((part.map_err(decode_error), r));
            }
            if r.done {
                return None;
            }
            let n = match r.body.fill_buf().await {
                Ok([]) => {
                    r.done = true;
                    let splitter = std::mem::take(&mut r.splitter);
                    let end = match splitter.finish() {
                        Some(json) => list_meta(&json).map(Part::End).map_err(decode_error),
                        None => Err(decode_error("the body ended inside the list")),
                    };
                    return Some((end, r));
                }
                Ok(chunk) => {
                    let ready = &mut r.ready;
                    r.splitter.feed(chunk, &mut |s| ready.push_back(s));
                    chunk.len()
                }
                Err(e) => {
                    r.done = true;
                    return Some((Err(kube::Error::ReadEvents(e)), r));
                }
            };
            r.body.consume_unpin(n);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    fn split(body: &[u8], chunk: usize) -> (Vec<Split>, Option<Vec<u8>>) {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        for c in body.chunks(chunk.max(1)) {
            s.feed(c, &mut |p| out.push(p));
        }
        (out, s.finish())
    }

    const LIST: &str = r#"{"kind":"EventList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"abc"},"items":[{"metadata":{"name":"a"},"message":"}]\"{["},{"metadata":{"name":"b"},"x":[1,{"y":[]}]}]}"#;

    /// Items come out whole, whatever the chunks, with brackets and quotes inside strings left
    /// alone; the head and the rest carry the metadata.
    #[test]
    fn a_body_splits_into_its_head_items_and_rest_in_chunks_of_any_size() {
        for chunk in [1, 2, 3, 7, 64, LIST.len()] {
            let (parts, rest) = split(LIST.as_bytes(), chunk);
            let [Split::Head(head), Split::Item(a), Split::Item(b)] = parts.as_slice() else {
                panic!("chunk {chunk}: {parts:?}");
            };
            let meta = list_meta(head).unwrap();
            assert_eq!(meta.resource_version.as_deref(), Some("12"));
            let a: serde_json::Value = serde_json::from_slice(a).unwrap();
            assert_eq!(a["message"], "}]\"{[");
            let b: serde_json::Value = serde_json::from_slice(b).unwrap();
            assert_eq!(b["x"][1]["y"], serde_json::json!([]));
            let rest = rest.unwrap();
            let whole: serde_json::Value = serde_json::from_slice(&rest).unwrap();
            assert_eq!(whole["items"], serde_json::json!([]));
            assert_eq!(list_meta(&rest).unwrap().continue_.as_deref(), Some("abc"));
        }
    }

    #[test]
    fn metadata_after_the_items_and_empty_lists_are_read_too() {
        let body = br#"{"items":[{"a":1}],"metadata":{"resourceVersion":"7"}}"#;
        let (parts, rest) = split(body, 5);
        assert!(matches!(parts.as_slice(), [Split::Head(_), Split::Item(_)]));
        let rest = rest.unwrap();
        assert_eq!(
            list_meta(&rest).unwrap().resource_version.as_deref(),
            Some("7")
        );
        let (parts, rest) = split(br#"{"metadata":{},"items":[]}"#, 3);
        assert!(matches!(parts.as_slice(), [Split::Head(_)]));
        assert!(list_meta(&rest.unwrap()).is_ok());
        let (parts, rest) = split(br#"{"metadata":{},"items":null}"#, 3);
        assert!(parts.is_empty());
        assert!(list_meta(&rest.unwrap()).is_ok());
    }

    #[test]
    fn a_cut_body_is_no_list() {
        let cut = &LIST.as_bytes()[..LIST.len() - 3];
        assert_eq!(split(cut, 4).1, None);
        assert_eq!(split(b"", 4).1, None);
        assert_eq!(split(br#"{"items":[{"a":"\"}"#, 4).1, None);
    }

    /// The stream over a body read in small chunks: the head, each item decoded, the end.
    #[tokio::test]
    async fn a_streamed_body_yields_its_items_one_by_one() {
        let chunks: Vec<std::io::Result<Vec<u8>>> =
            LIST.as_bytes().chunks(5).map(|c| Ok(c.to_vec())).collect();
        let body = futures::stream::iter(chunks).into_async_read();
        let parts: Vec<_> = read::<serde_json::Value>(body).collect().await;
        let kinds: Vec<String> = parts
            .iter()
            .map(|p| match p {
                Ok(Part::Head(m)) => format!("head {:?}", m.resource_version),
                Ok(Part::Item(v, n)) => format!("item {} {n}", v["metadata"]["name"]),
                Ok(Part::End(m)) => format!("end {:?}", m.continue_),
                Err(e) => format!("error {e}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "head Some(\"12\")",
                "item \"a\" 44",
                "item \"b\" 42",
                "end Some(\"abc\")"
            ]
        );
        let cut: Vec<std::io::Result<Vec<u8>>> = vec![Ok(LIST.as_bytes()[..60].to_vec())];
        let parts: Vec<_> = read::<serde_json::Value>(futures::stream::iter(cut).into_async_read())
            .collect()
            .await;
        assert!(matches!(parts.last(), Some(Err(_))), "{parts:?}");
    }
}
