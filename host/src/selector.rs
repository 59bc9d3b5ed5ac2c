//! Selectors (being written).
