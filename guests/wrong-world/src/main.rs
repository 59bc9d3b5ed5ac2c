//! A valid component of the wrong world: built for `wasm32-wasip2`, a plain binary becomes a
//! `wasi:cli/command` component, which exports `wasi:cli/run` and none of `describe`,
//! `reconcile` or `map`. The host must refuse to load it as a reconciler.

fn main() {
    println!("wrong world");
}
