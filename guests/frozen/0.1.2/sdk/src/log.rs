//! Logging through the host, which tags each line with this guest and request.
//!
//! Prefer the macros: [`debug!`](crate::debug), [`info!`](crate::info),
//! [`warn!`](crate::warn), [`error!`](crate::error) take `format!` arguments.

use crate::bindings::reconciled::runtime::log::{Level, log};

/// Logs `message` at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Logs `message` at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs `message` at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs `message` at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}

/// Logs at debug level: `debug!("saw {n} objects")`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::debug(&::std::format!($($arg)+)) };
}

/// Logs at info level: `info!("saw {n} objects")`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::info(&::std::format!($($arg)+)) };
}

/// Logs at warn level: `warn!("saw {n} objects")`.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::warn(&::std::format!($($arg)+)) };
}

/// Logs at error level: `error!("saw {n} objects")`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::error(&::std::format!($($arg)+)) };
}
