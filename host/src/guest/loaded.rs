//! Compiled modules in memory, by digest: one native code image and one linked `InstancePre`
//! per digest, however many guests, shadows and revisions run it.
//!
//! Where it may surprise:
//! - The registry holds modules weakly: a digest's code is freed once the last [`Module`]
//!   running it is dropped, and loading the digest again then goes to the precompile cache.
//! - Two loads of one new digest at the same moment may both compile it; the second to finish
//!   takes the first's code and drops its own, so only one image stays in memory.
//!
//! [`Module`]: super::Module

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use wasmtime::component::Component;

use crate::guest::artifact_cache::Staged;
use crate::guest::bindings::ReconcilerPre;
use crate::guest::code_pager::{self, CodeUse};
use crate::guest::imports::HostState;

/// One digest's compiled and linked code.
pub(crate) struct Compiled {
    pub(crate) component: Component,
    pub(crate) pre: ReconcilerPre<HostState>,
    /// Permits of the instance pool one instance holds (`engine::weight`).
    pub(crate) weight: u32,
    /// Bytes of the native code image; see `Module::compiled_bytes`.
    pub(crate) compiled_bytes: usize,
    /// The temporary file a freshly compiled module's code is mapped from, until the module is
    /// kept in the precompile cache (`Module::persist_artifact`).
    pub(crate) staged: Mutex<Option<Staged>>,
    /// When a guest last called it, for the code pager.
    pub(crate) code_use: CodeUse,
}

type Registry = Mutex<HashMap<String, Weak<Compiled>>>;

/// The digests whose code is in memory. Cheap to clone: clones share one registry.
#[derive(Clone, Default)]
pub(crate) struct Loaded(Arc<Registry>);

impl Loaded {
    /// Starts the thread that pages out the code of modules idle for [`code_pager::IDLE`]; it
    /// ends when the last clone of this registry is dropped.
    pub(crate) fn start_code_pager(&self) {
        code_pager::start(Arc::downgrade(&self.0), |registry: &Registry| {
            let held: Vec<Arc<Compiled>> =
                lock(registry).values().filter_map(Weak::upgrade).collect();
            let bytes: usize = held
                .iter()
                .map(|c| {
                    code_pager::page_out_if_idle(
                        &c.code_use,
                        c.component.image_range(),
                        code_pager::IDLE,
                    )
                })
                .sum();
            if bytes > 0 {
                tracing::debug!(bytes, "paged out idle guests' code");
            }
        });
    }

    /// The code of `digest`, if some module still holds it.
    pub(crate) fn get(&self, digest: &str) -> Option<Arc<Compiled>> {
        self.lock().get(digest).and_then(Weak::upgrade)
    }

    /// Records `compiled` as `digest`'s code and returns it; or, when another load recorded
    /// the digest first and still holds it, returns that one instead, so that one image stays.
    pub(crate) fn insert(&self, digest: &str, compiled: Arc<Compiled>) -> Arc<Compiled> {
        let mut map = self.lock();
        if let Some(held) = map.get(digest).and_then(Weak::upgrade) {
            return held;
        }
        // Dropped digests are forgotten here rather than on drop: a `Compiled` does not know
        // its registry.
        map.retain(|_, weak| weak.strong_count() > 0);
        map.insert(digest.to_string(), Arc::downgrade(&compiled));
        compiled
    }

    /// Whether some module holds `digest`'s code.
    pub(crate) fn holds(&self, digest: &str) -> bool {
        self.lock()
            .get(digest)
            .is_some_and(|weak| weak.strong_count() > 0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Compiled>>> {
        lock(&self.0)
    }
}

fn lock(registry: &Registry) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Compiled>>> {
    // A panic while holding the lock leaves the map whole: every change is one call.
    registry.lock().unwrap_or_else(|e| e.into_inner())
}
