//! reconciled: a WebAssembly-hosted reconciler runtime for Kubernetes.
