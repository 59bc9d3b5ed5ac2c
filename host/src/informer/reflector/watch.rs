//! Watching: one watch request and its stream of events, JSON lines or protobuf frames, applied
//! to the delta FIFO.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;

use super::{Condition, Error, Reflector, Result, WatchEnd, rv_of};
use crate::informer::protobuf;
use crate::object::ObjectRef;

/// The annotation on the bookmark that ends a WatchList's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

#[derive(Deserialize)]
struct WatchLine {
    #[serde(rename = "type")]
    kind: String,
    object: Value,
}

/// One watch event, read from JSON or protobuf.
enum Incoming {
    /// `ADDED`, `MODIFIED` or `DELETED`; `object` is `None` when it could not be cached.
    Object {
        kind: Change,
        object: Option<ObjectRef>,
        resource_version: Option<String>,
    },
    Bookmark {
        resource_version: Option<String>,
        ends_initial: bool,
    },
    Error {
        code: u64,
        message: String,
    },
    Unknown(String),
}

#[derive(Clone, Copy)]
enum Change {
    Added,
    Modified,
    Deleted,
}

impl Change {
    fn of(event_type: &str) -> Option<Change> {
        match event_type {
            "ADDED" => Some(Change::Added),
            "MODIFIED" => Some(Change::Modified),
            "DELETED" => Some(Change::Deleted),
            _ => None,
        }
    }
}

type BoxedReader = Box<dyn AsyncBufRead + Send + Unpin>;

/// A watch response body: JSON lines, or length-prefixed protobuf frames of a kind.
enum WatchBody {
    Lines(futures::io::Lines<BoxedReader>),
    Frames(protobuf::Kind, BoxedReader),
}

/// One unit of a [`WatchBody`].
enum Frame {
    Line(String),
    Protobuf(protobuf::Kind, Vec<u8>),
}

impl WatchBody {
    /// The next line or frame; `None` at a clean end of the stream.
    async fn next(&mut self) -> Option<std::io::Result<Frame>> {
        match self {
            WatchBody::Lines(lines) => lines.next().await.map(|l| l.map(Frame::Line)),
            WatchBody::Frames(kind, reader) => next_frame(reader)
                .await
                .map(|f| f.map(|bytes| Frame::Protobuf(*kind, bytes)))
                .transpose(),
        }
    }
}

/// One frame: a 4-byte big-endian length, then that many bytes. `None` at a clean end, between
/// frames.
async fn next_frame<R: AsyncRead + Unpin + ?Sized>(
    reader: &mut R,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    if reader.read(&mut len[..1]).await? == 0 {
        return Ok(None);
    }
    reader.read_exact(&mut len[1..]).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > protobuf::MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "a watch frame of {len} bytes, over the {} MiB any object could need",
                protobuf::MAX_FRAME >> 20
            ),
        ));
    }
    let mut frame = vec![0; len];
    reader.read_exact(&mut frame).await?;
    Ok(Some(frame))
}

impl Reflector {
    /// Opens one watch and processes it until it ends. With `initial`, it is a WatchList: its
    /// initial events are gathered and replace the FIFO's content at the bookmark that ends
    /// them (a sync, see [`Self::complete_sync`]), and the same stream then carries on as a
    /// normal watch.
    pub(super) async fn watch_stream(&mut self, initial: bool, rv: &str) -> Result<WatchEnd> {
        // Randomised so that a fleet of watchers does not reconnect in lockstep.
        let timeout = fastrand::u64(300..=600);
        let timeout_s = timeout.to_string();
        let mut extra = vec![
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_s.as_str()),
        ];
        if initial {
            extra.push(("sendInitialEvents", "true"));
            extra.push(("resourceVersionMatch", "NotOlderThan"));
            extra.push(("resourceVersion", rv));
        } else {
            extra.push(("resourceVersion", rv));
        }
        let mut req = http::Request::get(self.query(&extra));
        if self.protobuf.is_some() {
            req = req.header(http::header::ACCEPT, protobuf::ACCEPT_WATCH);
        }
        let req = req.body(Vec::new()).map_err(|source| Error::Build {
            what: "watch",
            source,
        })?;
        self.stats.watches.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let opened = match self.protobuf {
            None => self
                .client
                .request_stream(req)
                .await
                .map(|s| WatchBody::Lines((Box::new(s) as BoxedReader).lines())),
            Some(kind) => self.send(req).await.map(|res| {
                let is_protobuf =
                    protobuf::is_protobuf(res.headers().get(http::header::CONTENT_TYPE));
                let reader: BoxedReader = Box::new(
                    res.into_body()
                        .into_data_stream()
                        .map_err(std::io::Error::other)
                        .into_async_read(),
                );
                if is_protobuf {
                    WatchBody::Frames(kind, reader)
                } else {
                    WatchBody::Lines(reader.lines())
                }
            }),
        };
        let mut body = match opened {
            Ok(body) => body,
            Err(kube::Error::Api(s)) if initial && matches!(s.code, 400 | 422) => {
                return Err(Error::WatchListRefused {
                    code: s.code,
                    reason: s.reason.clone(),
                    message: s.message.clone(),
                });
            }
            Err(e) => return Err(e.into()),
        };
        self.connectivity.reached();
        self.stats.heard();
        if !initial && self.syncs > 0 {
            // Back to watching after a failure: the server is answering for this resource again
            // and replays every event since `rv` first, so the cache is as current as the watch.
            self.report(Condition::Watching);
        }
        // The server ends the watch at `timeoutSeconds`; a stream silent for much longer than
        // that is a dead connection nobody told us about.
        let deadline = started + Duration::from_secs(timeout + 30);
        let mut events = 0u64;
        // A WatchList's initial events, gathered until the bookmark that ends them.
        let mut gathering = initial.then(Vec::new);
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.next()).await {
                Err(_) => return Err(Error::Stalled),
                Ok(None) if gathering.is_some() => return Err(Error::EndedEarly),
                Ok(None) => {
                    return Ok(WatchEnd::Closed {
                        events,
                        elapsed: started.elapsed(),
                    });
                }
                Ok(Some(Err(e))) => return Err(Error::StreamBroke(e)),
                Ok(Some(Ok(frame))) => frame,
            };
            let incoming = match frame {
                Frame::Line(line) if line.trim().is_empty() => continue,
                Frame::Line(line) => {
                    self.count_event(events, gathering.is_some());
                    let event: WatchLine = serde_json::from_str(&line).map_err(Error::Malformed)?;
                    self.json_event(event)
                }
                Frame::Protobuf(kind, bytes) => {
                    self.count_event(events, gathering.is_some());
                    self.protobuf_event(kind, &bytes)?
                }
            };
            events += 1;
            self.apply(incoming, &mut gathering)?;
        }
    }

    /// Counts the event numbered `n` in its stream. Among a WatchList's initial events the
    /// server's sign of life is stamped on every 64th only: a clock read and a lock per event
    /// were a visible part of an initial sync of 100k objects, and a stream that busy is plainly
    /// alive. Every later event is stamped, since one may be all a quiet kind sees for minutes.
    fn count_event(&self, n: u64, initial: bool) {
        if !initial || n.is_multiple_of(64) {
            self.stats.heard();
        }
        self.stats.events.fetch_add(1, Ordering::Relaxed);
    }

    /// A JSON watch event as an [`Incoming`] one.
    fn json_event(&self, event: WatchLine) -> Incoming {
        if let Some(kind) = Change::of(&event.kind) {
            let resource_version = rv_of(&event.object).map(str::to_string);
            return Incoming::Object {
                kind,
                object: self.to_object(event.object, None),
                resource_version,
            };
        }
        match event.kind.as_str() {
            "BOOKMARK" => Incoming::Bookmark {
                resource_version: rv_of(&event.object).map(str::to_string),
                ends_initial: event.object["metadata"]["annotations"][INITIAL_EVENTS_END] == "true",
            },
            "ERROR" => Incoming::Error {
                code: event
                    .object
                    .get("code")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                message: event
                    .object
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            },
            other => Incoming::Unknown(other.to_string()),
        }
    }

    /// A protobuf watch frame as an [`Incoming`] event.
    fn protobuf_event(&self, kind: protobuf::Kind, frame: &[u8]) -> Result<Incoming> {
        self.stats.protobuf_reads.fetch_add(1, Ordering::Relaxed);
        let event = protobuf::watch_event(frame).map_err(Error::Protobuf)?;
        let object = event.object;
        let other_kind = |want: &str| {
            Error::Protobuf(protobuf::Error::OtherKind {
                want: want.to_string(),
                got: object.kind.to_string(),
            })
        };
        let resource_version = || -> Result<Option<String>> {
            let id = protobuf::identity(object.raw).map_err(Error::Protobuf)?;
            Ok(Some(id.resource_version)
                .filter(|rv| !rv.is_empty())
                .map(str::to_string))
        };
        if let Some(change) = Change::of(event.kind) {
            if object.kind != kind.name() {
                return Err(other_kind(kind.name()));
            }
            return Ok(Incoming::Object {
                kind: change,
                object: self.protobuf_object(kind, object.raw)?,
                resource_version: resource_version()?,
            });
        }
        Ok(match event.kind {
            "BOOKMARK" => Incoming::Bookmark {
                resource_version: resource_version()?,
                ends_initial: protobuf::annotation(object.raw, INITIAL_EVENTS_END)
                    .map_err(Error::Protobuf)?
                    == Some("true"),
            },
            "ERROR" => {
                if object.kind != "Status" {
                    return Err(other_kind("Status"));
                }
                let status = protobuf::status(object.raw).map_err(Error::Protobuf)?;
                Incoming::Error {
                    code: u64::try_from(status.code).unwrap_or(0),
                    message: status.message,
                }
            }
            other => Incoming::Unknown(other.to_string()),
        })
    }

    /// Applies one watch event to the FIFO, or, while `gathering` a WatchList's initial events,
    /// keeps it until the bookmark that ends them replaces the FIFO's content (and `gathering`
    /// becomes `None`).
    fn apply(&mut self, event: Incoming, gathering: &mut Option<Vec<ObjectRef>>) -> Result<()> {
        match event {
            Incoming::Object {
                kind,
                object,
                resource_version,
            } => {
                let Some(obj) = object else {
                    return Ok(());
                };
                if let Some(gathered) = gathering {
                    // Initial events are not in resourceVersion order: the RV moves only at the
                    // bookmark that ends them.
                    gathered.push(obj);
                    return Ok(());
                }
                match kind {
                    Change::Added => self.fifo.add(obj),
                    Change::Modified => self.fifo.update(obj),
                    Change::Deleted => self.fifo.delete(obj),
                }
                if let Some(rv) = resource_version {
                    self.last_rv = rv;
                }
            }
            Incoming::Bookmark {
                resource_version,
                ends_initial,
            } => {
                if let Some(rv) = resource_version {
                    self.last_rv = rv;
                }
                if ends_initial && let Some(gathered) = gathering.take() {
                    self.stats.watch_list_syncs.fetch_add(1, Ordering::Relaxed);
                    self.complete_sync(gathered);
                }
            }
            Incoming::Error { code, message } => {
                return Err(match code {
                    410 => Error::Gone(message),
                    403 => Error::Forbidden(message),
                    _ => Error::WatchError { code, message },
                });
            }
            Incoming::Unknown(other) => return Err(Error::UnknownEvent(other)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(frames: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            out.extend_from_slice(&(f.len() as u32).to_be_bytes());
            out.extend_from_slice(f);
        }
        out
    }

    #[tokio::test]
    async fn frames_come_whole_and_a_clean_end_is_none() {
        let mut r = futures::io::Cursor::new(framed(&[b"one", b"", b"three"]));
        assert_eq!(next_frame(&mut r).await.unwrap().unwrap(), b"one");
        assert_eq!(next_frame(&mut r).await.unwrap().unwrap(), b"");
        assert_eq!(next_frame(&mut r).await.unwrap().unwrap(), b"three");
        assert!(next_frame(&mut r).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_stream_cut_inside_a_frame_is_an_error_not_an_end() {
        for cut in 1..7 {
            let mut bytes = framed(&[b"abc"]);
            bytes.truncate(cut);
            let mut r = futures::io::Cursor::new(bytes);
            let err = next_frame(&mut r).await.unwrap_err();
            assert_eq!(
                err.kind(),
                std::io::ErrorKind::UnexpectedEof,
                "cut at {cut}"
            );
        }
    }

    #[tokio::test]
    async fn a_frame_longer_than_any_object_is_refused_before_it_is_allocated() {
        let mut r = futures::io::Cursor::new(u32::MAX.to_be_bytes().to_vec());
        let err = next_frame(&mut r).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("64 MiB"), "{err}");
    }
}
