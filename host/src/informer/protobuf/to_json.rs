//! One protobuf object written as the store's compact JSON, driven by the tables in
//! [`super::schema`]: keys sorted, zero values left out exactly where the server's JSON leaves
//! them out, and the informer's transform applied on the way (so a stripped `managedFields` is
//! never even written).

use base64::Engine as _;

use super::error::Error;
use super::schema::{Emit, Field, Message, OBJECT_META, Ty};
use super::wire::{self, Fields, Value, WireError};

/// The part of the informer's transform applied while writing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Trim<'t> {
    /// Only `apiVersion`, `kind` and `metadata` at the top.
    pub(super) metadata_only: bool,
    /// No `metadata.managedFields`.
    pub(super) strip_managed_fields: bool,
    /// Annotation keys to leave out.
    pub(super) strip_annotations: &'t [String],
}

/// Most fields any table has: the first pass keeps one slot per field on the stack.
const MAX_FIELDS: usize = 16;

/// Writes the top-level object `bytes` of type `message`.
pub(super) fn write_object(
    out: &mut Vec<u8>,
    message: &'static Message,
    bytes: &[u8],
    trim: Trim<'_>,
) -> Result<(), Error> {
    write_message(out, message, bytes, trim, true)
}

fn write_message(
    out: &mut Vec<u8>,
    message: &'static Message,
    bytes: &[u8],
    trim: Trim<'_>,
    top: bool,
) -> Result<(), Error> {
    debug_assert!(message.fields.len() <= MAX_FIELDS);
    // First pass: every field is known, and a singular one appears once.
    let mut single: [Option<Value<'_>>; MAX_FIELDS] = [None; MAX_FIELDS];
    let mut repeated = [false; MAX_FIELDS];
    for field in Fields::new(bytes) {
        let (number, value) = field?;
        let i = message
            .fields
            .iter()
            .position(|f| f.number == number)
            .ok_or(Error::UnknownField {
                message: message.name,
                number,
            })?;
        match message.fields[i].ty {
            Ty::Repeated(_) | Ty::MapString | Ty::MapBytes => repeated[i] = true,
            _ => {
                if single[i].replace(value).is_some() {
                    return Err(Error::Repeated {
                        message: message.name,
                        field: message.fields[i].json,
                    });
                }
            }
        }
    }
    let is_meta = std::ptr::eq(message, &OBJECT_META);
    out.push(b'{');
    let mut first = true;
    for (i, field) in message.fields.iter().enumerate() {
        if top && trim.metadata_only && !matches!(field.json, "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if is_meta && trim.strip_managed_fields && field.json == "managedFields" {
            continue;
        }
        match field.ty {
            Ty::Repeated(inner) => {
                if repeated[i] {
                    key(out, &mut first, field.json);
                    out.push(b'[');
                    for (n, value) in occurrences(bytes, field.number).enumerate() {
                        if n > 0 {
                            out.push(b',');
                        }
                        write_value(out, message, field, inner, value?, trim)?;
                    }
                    out.push(b']');
                }
            }
            Ty::MapString | Ty::MapBytes => {
                // Absent maps are common (no labels, no binaryData): not worth a second scan.
                if !repeated[i] {
                    continue;
                }
                let strip: &[String] = if is_meta && field.json == "annotations" {
                    trim.strip_annotations
                } else {
                    &[]
                };
                let entries = map_entries(bytes, field.number, strip)?;
                if !entries.is_empty() {
                    key(out, &mut first, field.json);
                    write_map(out, &field.ty, &entries)?;
                }
            }
            _ => {
                if shown(field, single[i]) {
                    key(out, &mut first, field.json);
                    match single[i] {
                        None => write_zero(out, &field.ty),
                        Some(value) => write_value(out, message, field, &field.ty, value, trim)?,
                    }
                }
            }
        }
    }
    out.push(b'}');
    Ok(())
}

/// Whether a singular field is shown, given what is on the wire.
fn shown(field: &Field, value: Option<Value<'_>>) -> bool {
    match (field.emit, value) {
        (Emit::Always, _) => true,
        (_, None) => matches!(field.ty, Ty::Const(_)),
        (Emit::Present, Some(_)) => true,
        (Emit::OmitZero | Emit::OmitEmpty, Some(Value::Varint(v))) => v != 0,
        (Emit::OmitZero | Emit::OmitEmpty, Some(Value::Bytes(b))) => !b.is_empty(),
        (Emit::OmitZero | Emit::OmitEmpty, Some(Value::Fixed)) => true,
    }
}

fn key(out: &mut Vec<u8>, first: &mut bool, name: &str) {
    if !std::mem::take(first) {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

fn string(out: &mut Vec<u8>, s: &str) {
    // Most strings (names, data) need no escaping: one pass that vectorises finds out, and the
    // bytes are copied as they are. Anything else is escaped by serde_json, as the store's JSON
    // path escapes it.
    let plain = !s.bytes().fold(false, |escape, b| {
        escape | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
    }
}

/// An absent field that is shown all the same (`Emit::Always`).
fn write_zero(out: &mut Vec<u8>, ty: &Ty) {
    match ty {
        Ty::Const(v) => string(out, v),
        Ty::String => out.extend_from_slice(b"\"\""),
        Ty::Bool => out.extend_from_slice(b"false"),
        Ty::Int64 => out.push(b'0'),
        Ty::Time | Ty::RawJson => out.extend_from_slice(b"null"),
        Ty::Message(_) | Ty::MapString | Ty::MapBytes => out.extend_from_slice(b"{}"),
        Ty::Repeated(_) => out.extend_from_slice(b"[]"),
    }
}

fn write_value(
    out: &mut Vec<u8>,
    message: &'static Message,
    field: &Field,
    ty: &Ty,
    value: Value<'_>,
    trim: Trim<'_>,
) -> Result<(), Error> {
    let wrong = || Error::WireType {
        message: message.name,
        field: field.json,
    };
    match (ty, value) {
        (Ty::Const(v), _) => string(out, v),
        (Ty::String, Value::Bytes(b)) => string(out, wire::text(b)?),
        (Ty::Bool, Value::Varint(v)) => {
            out.extend_from_slice(if v != 0 { b"true" } else { b"false" });
        }
        (Ty::Int64, Value::Varint(v)) => {
            serde_json::to_writer(&mut *out, &(v as i64)).expect("writing to a Vec cannot fail");
        }
        (Ty::Time, Value::Bytes(b)) => time(out, b)?,
        (Ty::RawJson, Value::Bytes(b)) => raw_json(out, b)?,
        (Ty::Message(m), Value::Bytes(b)) => write_message(out, m, b, trim, false)?,
        _ => return Err(wrong()),
    }
    Ok(())
}

fn base64(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    let start = out.len();
    let len = base64::encoded_len(b.len(), true).expect("a slice in memory has a base64 length");
    out.resize(start + len, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(b, &mut out[start..])
        .expect("the buffer is sized by encoded_len");
    debug_assert_eq!(written, len);
    out.push(b'"');
}

/// `metav1.Time`: `{1: seconds, 2: nanos}`; the server's JSON shows seconds only.
fn time(out: &mut Vec<u8>, b: &[u8]) -> Result<(), Error> {
    if b.is_empty() {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    let mut seconds = 0i64;
    for field in Fields::new(b) {
        match field? {
            (1, Value::Varint(v)) => seconds = v as i64,
            (2, Value::Varint(_)) => {}
            (number, _) => {
                return Err(Error::UnknownField {
                    message: "Time",
                    number,
                });
            }
        }
    }
    let at = jiff::Timestamp::from_second(seconds).map_err(|_| Error::BadTime(seconds))?;
    out.push(b'"');
    out.extend_from_slice(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string().as_bytes());
    out.push(b'"');
    Ok(())
}

/// `metav1.FieldsV1`: `{1: raw JSON}`, shown as that JSON with its keys sorted, as the store
/// would hold it after reading the server's JSON.
fn raw_json(out: &mut Vec<u8>, b: &[u8]) -> Result<(), Error> {
    let mut raw = None;
    for field in Fields::new(b) {
        match field? {
            (1, Value::Bytes(r)) => raw = Some(r),
            (number, _) => {
                return Err(Error::UnknownField {
                    message: "FieldsV1",
                    number,
                });
            }
        }
    }
    match raw {
        None => out.extend_from_slice(b"null"),
        Some(r) => {
            let value: serde_json::Value = serde_json::from_slice(r).map_err(Error::BadJson)?;
            serde_json::to_writer(&mut *out, &value).expect("writing to a Vec cannot fail");
        }
    }
    Ok(())
}

/// Field `number`'s values in `bytes`, in wire order.
fn occurrences<'a>(
    bytes: &'a [u8],
    number: u32,
) -> impl Iterator<Item = Result<Value<'a>, WireError>> + 'a {
    Fields::new(bytes).filter_map(move |f| match f {
        Ok((n, v)) if n == number => Some(Ok(v)),
        Ok(_) => None,
        Err(e) => Some(Err(e)),
    })
}

/// A map field's entries, sorted by key, the last of equal keys winning (as in Go), without the
/// keys in `strip`.
pub(super) fn map_entries<'a>(
    bytes: &'a [u8],
    number: u32,
    strip: &[String],
) -> Result<Vec<(&'a str, &'a [u8])>, Error> {
    let mut entries = Vec::new();
    for value in occurrences(bytes, number) {
        let Value::Bytes(entry) = value? else {
            return Err(Error::WireType {
                message: "map entry",
                field: "entry",
            });
        };
        let (mut k, mut v): (&[u8], &[u8]) = (&[], &[]);
        for field in Fields::new(entry) {
            match field? {
                (1, Value::Bytes(b)) => k = b,
                (2, Value::Bytes(b)) => v = b,
                (number, _) => {
                    return Err(Error::UnknownField {
                        message: "map entry",
                        number,
                    });
                }
            }
        }
        let k = wire::text(k)?;
        if !strip.iter().any(|s| s == k) {
            entries.push((k, v));
        }
    }
    // Stable, so equal keys keep wire order and the last is kept.
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            *earlier = *later;
            true
        } else {
            false
        }
    });
    Ok(entries)
}

fn write_map(out: &mut Vec<u8>, ty: &Ty, entries: &[(&str, &[u8])]) -> Result<(), Error> {
    out.push(b'{');
    for (n, (k, v)) in entries.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        string(out, k);
        out.push(b':');
        match ty {
            Ty::MapBytes => base64(out, v),
            _ => string(out, wire::text(v)?),
        }
    }
    out.push(b'}');
    Ok(())
}
