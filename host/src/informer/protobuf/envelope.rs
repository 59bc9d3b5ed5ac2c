//! What wraps objects on the wire: the `k8s\0` magic and `runtime.Unknown` around a whole
//! response, a list's metadata and items, a watch frame's event, and a `Status`.

use super::error::Error;
use super::wire::{self, Fields, Value};

/// Every protobuf response body, and every object inside a watch event, starts with it.
const MAGIC: &[u8] = b"k8s\0";

/// A `runtime.Unknown`: the type of `raw` and its bytes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Unknown<'a> {
    pub(crate) api_version: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) raw: &'a [u8],
}

fn bytes_of<'a>(
    value: Value<'a>,
    message: &'static str,
    field: &'static str,
) -> Result<&'a [u8], Error> {
    match value {
        Value::Bytes(b) => Ok(b),
        _ => Err(Error::WireType { message, field }),
    }
}

fn text_of<'a>(
    value: Value<'a>,
    message: &'static str,
    field: &'static str,
) -> Result<&'a str, Error> {
    Ok(wire::text(bytes_of(value, message, field)?)?)
}

/// Reads the magic and the `runtime.Unknown` after it.
pub(crate) fn unknown(body: &[u8]) -> Result<Unknown<'_>, Error> {
    let rest = body.strip_prefix(MAGIC).ok_or(Error::NoMagic)?;
    let mut out = Unknown::default();
    for field in Fields::new(rest) {
        match field? {
            (1, v) => {
                for f in Fields::new(bytes_of(v, "Unknown", "typeMeta")?) {
                    match f? {
                        (1, v) => out.api_version = text_of(v, "TypeMeta", "apiVersion")?,
                        (2, v) => out.kind = text_of(v, "TypeMeta", "kind")?,
                        _ => {}
                    }
                }
            }
            (2, v) => out.raw = bytes_of(v, "Unknown", "raw")?,
            (3, v) => {
                let encoding = text_of(v, "Unknown", "contentEncoding")?;
                if !encoding.is_empty() {
                    return Err(Error::ContentEncoding(encoding.to_string()));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// One page of a LIST: its `ListMeta` and its items, each an encoded object.
#[derive(Debug, Default)]
pub(crate) struct ListPage<'a> {
    pub(crate) resource_version: &'a str,
    /// Empty on the last page.
    pub(crate) continue_token: &'a str,
    pub(crate) items: Vec<&'a [u8]>,
}

/// Reads a LIST response body.
pub(crate) fn list_page(body: &[u8]) -> Result<ListPage<'_>, Error> {
    let list = unknown(body)?;
    if !list.kind.ends_with("List") {
        return Err(Error::NotAList(list.kind.to_string()));
    }
    let mut page = ListPage::default();
    for field in Fields::new(list.raw) {
        match field? {
            (1, v) => {
                for f in Fields::new(bytes_of(v, "List", "metadata")?) {
                    match f? {
                        (2, v) => {
                            page.resource_version = text_of(v, "ListMeta", "resourceVersion")?
                        }
                        (3, v) => page.continue_token = text_of(v, "ListMeta", "continue")?,
                        _ => {}
                    }
                }
            }
            (2, v) => page.items.push(bytes_of(v, "List", "items")?),
            (number, _) => {
                return Err(Error::UnknownField {
                    message: "List",
                    number,
                });
            }
        }
    }
    Ok(page)
}

/// One watch frame: `metav1.WatchEvent`, its object wrapped as a whole response is.
#[derive(Debug, Default)]
pub(crate) struct WatchEvent<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub(crate) kind: &'a str,
    pub(crate) object: Unknown<'a>,
}

/// Reads one watch frame (without its length prefix).
pub(crate) fn watch_event(frame: &[u8]) -> Result<WatchEvent<'_>, Error> {
    let mut event = WatchEvent::default();
    let mut object = None;
    for field in Fields::new(frame) {
        match field? {
            (1, v) => event.kind = text_of(v, "WatchEvent", "type")?,
            (2, v) => {
                for f in Fields::new(bytes_of(v, "WatchEvent", "object")?) {
                    if let (1, v) = f? {
                        object = Some(bytes_of(v, "RawExtension", "raw")?);
                    }
                }
            }
            _ => {}
        }
    }
    event.object = unknown(object.ok_or(Error::NoObject)?)?;
    Ok(event)
}

/// A `metav1.Status`'s code, reason and message.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Status {
    pub(crate) code: i32,
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// Reads a `metav1.Status` (the `raw` of an `Unknown` whose kind is `Status`).
pub(crate) fn status(raw: &[u8]) -> Result<Status, Error> {
    let mut out = Status::default();
    for field in Fields::new(raw) {
        match field? {
            (3, v) => out.message = text_of(v, "Status", "message")?.to_string(),
            (4, v) => out.reason = text_of(v, "Status", "reason")?.to_string(),
            (6, Value::Varint(c)) => out.code = c as i64 as i32,
            _ => {}
        }
    }
    Ok(out)
}
