//! Tuning that is not part of an informer's identity.

use std::time::Duration;

/// Tuning that is not part of an informer's identity.
#[derive(Debug, Clone)]
pub struct Options {
    /// Events a subscriber may have waiting before it is switched to an
    /// [`Event::Resync`](super::Event::Resync).
    pub subscriber_buffer: usize,
    /// Periodic resync (off by default): a Sync for every stored key with nothing queued.
    pub resync: Option<Duration>,
    /// LIST page size.
    pub page_size: u32,
    /// Use WatchList for initial syncs when the server allows it.
    pub watch_list: bool,
    /// Read built-in kinds that have a protobuf table (see [`super::protobuf`]) as protobuf.
    pub protobuf: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            subscriber_buffer: 4096,
            resync: None,
            page_size: 500,
            watch_list: true,
            protobuf: true,
        }
    }
}
