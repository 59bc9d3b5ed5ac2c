//! What the host logs, read back by tests: one subscriber for the whole test binary, installed
//! by the first test that asks, capturing every line from then on.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The lines logged since the capture began. Call it before what must be captured happens.
pub fn capture() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buffer
    })
}

/// The first captured line holding every one of `what`.
pub fn line_with(what: &[&str]) -> Option<String> {
    let text = String::from_utf8_lossy(&capture().lock().unwrap()).into_owned();
    text.lines()
        .find(|l| what.iter().all(|w| l.contains(w)))
        .map(str::to_string)
}

/// Whether a captured line holds every one of `what`.
pub fn logged(what: &[&str]) -> bool {
    line_with(what).is_some()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
