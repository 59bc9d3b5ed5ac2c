//! Writes `$OUT_DIR/ballast.bin`, which `src/lib.rs` embeds: with feature `big`, 12_000_000
//! bytes of xorshift output (incompressible, and the same on every build); otherwise empty.

use std::path::PathBuf;
use std::{env, fs};

/// Bytes of ballast with feature `big`.
const SIZE: usize = 12_000_000;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let ballast = if env::var_os("CARGO_FEATURE_BIG").is_some() {
        xorshift(SIZE)
    } else {
        Vec::new()
    };
    fs::write(out.join("ballast.bin"), ballast).expect("cannot write ballast.bin");
}

/// `len` bytes of xorshift64 from a fixed seed.
fn xorshift(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}
