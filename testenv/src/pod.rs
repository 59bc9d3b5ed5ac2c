//! A Deployment's pod run with [`Podman`](crate::podman::Podman) the way a kubelet would run it,
//! against the loopback control plane: the ServiceAccount's token and the cluster CA where
//! in-cluster clients look, ConfigMap volumes written out, an emptyDir per replica with the
//! `fsGroup`'s ownership, the env (`fieldRef`s to the pod's name and namespace), and the
//! `securityContext` (user, read-only root, no privilege escalation, dropped capabilities)
//! and memory limit as podman flags.
//!
//! Where it differs from a pod: the replicas share the host's network, so each listens on a
//! loopback port of its own instead of the container port (see [`Pod::args`]); probes are
//! whatever the caller polls; the token is not rotated (it lasts an hour); CPU requests and
//! limits, seccomp profiles other than podman's default, and scheduling are not applied. What it
//! cannot reproduce faithfully it refuses with [`Error::Unsupported`] rather than ignore: a
//! `command`, `envFrom`, added capabilities, init containers, `subPath` mounts, ConfigMap
//! `items` or `binaryData`, and volumes other than ConfigMaps and emptyDirs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, ServiceAccount};
use kube::Api;
use kube::api::PostParams;

/// Why a Deployment's pod cannot be run here.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Deployment asks for something this runner does not do.
    #[error("deployment {deployment}: {what} is not supported by testenv::pod")]
    Unsupported {
        /// Which Deployment.
        deployment: String,
        /// What it asked for.
        what: String,
    },
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// Its answer.
        source: kube::Error,
    },
    /// A file or directory could not be written.
    #[error("{path}: {source}")]
    Io {
        /// Which.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The first container of a Deployment's pod template, ready to run as replicas.
#[derive(Debug)]
pub struct Pod {
    deployment: String,
    namespace: String,
    spec: PodSpec,
    container: Container,
    dir: PathBuf,
    volumes: BTreeMap<String, PathBuf>,
    api: SocketAddr,
}

impl Pod {
    /// Reads Deployment `namespace/name` from the API server (as applied), asks a token for
    /// its ServiceAccount, and writes what its pods mount under `dir`: the token, `ca` (the
    /// cluster CA file) and the namespace, each ConfigMap volume's keys, and one directory per
    /// emptyDir. Only the template's first container runs.
    ///
    /// Needs root: emptyDirs are chowned to the pod's `fsGroup`.
    pub async fn new(
        admin: &kube::Client,
        namespace: &str,
        name: &str,
        api: SocketAddr,
        ca: &Path,
        dir: &Path,
    ) -> Result<Pod, Error> {
        let unsupported = |what: String| Error::Unsupported {
            deployment: format!("{namespace}/{name}"),
            what,
        };
        let deployment = Api::<Deployment>::namespaced(admin.clone(), namespace)
            .get(name)
            .await
            .map_err(|source| Error::Api {
                what: format!("get deployment {namespace}/{name}"),
                source,
            })?;
        let spec = deployment
            .spec
            .template
            .spec
            .ok_or_else(|| unsupported("a template without a pod spec".into()))?;
        let container = spec
            .containers
            .first()
            .cloned()
            .ok_or_else(|| unsupported("a pod without containers".into()))?;
        if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(unsupported("init containers".into()));
        }
        if container.command.is_some() {
            return Err(unsupported(
                "a command (only args after the image's entrypoint)".into(),
            ));
        }
        if container.env_from.is_some() {
            return Err(unsupported("envFrom".into()));
        }
        let security = container.security_context.as_ref();
        if let Some(add) = security.and_then(|s| s.capabilities.as_ref()?.add.as_ref()) {
            return Err(unsupported(format!("added capabilities {}", add.join(","))));
        }
        if let Some(mount) = container
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.sub_path.is_some())
        {
            return Err(unsupported(format!("subPath on mount {}", mount.name)));
        }

        let sa_dir = dir.join("serviceaccount");
        mkdir(&sa_dir)?;
        let sa = spec.service_account_name.as_deref().unwrap_or("default");
        let token: TokenRequest = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
            .create_subresource(
                "token",
                sa,
                &PostParams::default(),
                &TokenRequest::default(),
            )
            .await
            .map_err(|source| Error::Api {
                what: format!("a token for serviceaccount {namespace}/{sa}"),
                source,
            })?;
        let token = token
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| Error::Api {
                what: format!("a token for serviceaccount {namespace}/{sa}"),
                source: kube::Error::Service("the TokenRequest came back without a token".into()),
            })?;
        write(&sa_dir.join("token"), token.as_bytes())?;
        let ca_pem = std::fs::read(ca).map_err(|source| Error::Io {
            path: ca.to_path_buf(),
            source,
        })?;
        write(&sa_dir.join("ca.crt"), &ca_pem)?;
        write(&sa_dir.join("namespace"), namespace.as_bytes())?;

        let mut volumes = BTreeMap::new();
        let fs_group = spec.security_context.as_ref().and_then(|s| s.fs_group);
        for volume in spec.volumes.iter().flatten() {
            let path = dir.join("volumes").join(&volume.name);
            mkdir(&path)?;
            if let Some(source) = &volume.config_map {
                if source.items.is_some() {
                    return Err(unsupported(format!(
                        "items on ConfigMap volume {}",
                        volume.name
                    )));
                }
                let cm = Api::<ConfigMap>::namespaced(admin.clone(), namespace)
                    .get(&source.name)
                    .await
                    .map_err(|source_err| Error::Api {
                        what: format!("get configmap {namespace}/{}", source.name),
                        source: source_err,
                    })?;
                if cm.binary_data.as_ref().is_some_and(|b| !b.is_empty()) {
                    return Err(unsupported(format!(
                        "binaryData in ConfigMap {}",
                        source.name
                    )));
                }
                for (key, value) in cm.data.unwrap_or_default() {
                    write(&path.join(key), value.as_bytes())?;
                }
            } else if volume.empty_dir.is_some() {
                // What fsGroup does to an emptyDir: group-owned, group-writable, setgid.
                if let Some(group) = fs_group {
                    std::os::unix::fs::chown(&path, None, Some(group as u32)).map_err(
                        |source| Error::Io {
                            path: path.clone(),
                            source,
                        },
                    )?;
                }
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o2775)).map_err(
                    |source| Error::Io {
                        path: path.clone(),
                        source,
                    },
                )?;
            } else {
                return Err(unsupported(format!(
                    "volume {} (only ConfigMap and emptyDir volumes)",
                    volume.name
                )));
            }
            volumes.insert(volume.name.clone(), path);
        }
        Ok(Pod {
            deployment: format!("{namespace}/{name}"),
            namespace: namespace.to_string(),
            spec,
            container,
            dir: dir.to_path_buf(),
            volumes,
            api,
        })
    }

    /// The pod spec, as the API server returned it.
    pub fn spec(&self) -> &PodSpec {
        &self.spec
    }

    /// The container that runs: the template's first.
    pub fn container(&self) -> &Container {
        &self.container
    }

    /// `podman run` flags for replica `name`: what the kubelet would set up for a pod of that
    /// name. Each replica gets emptyDirs of its own.
    pub fn flags(&self, name: &str) -> Result<Vec<String>, Error> {
        let unsupported = |what: String| Error::Unsupported {
            deployment: self.deployment.clone(),
            what,
        };
        let mut flags: Vec<String> = vec!["--network=host".into()];
        let ps = self.spec.security_context.clone().unwrap_or_default();
        if let Some(user) = ps.run_as_user {
            flags.push(format!("--user={user}:{}", ps.run_as_group.unwrap_or(user)));
        }
        if let Some(group) = ps.fs_group {
            flags.push(format!("--group-add={group}"));
        }
        let cs = self.container.security_context.clone().unwrap_or_default();
        if cs.read_only_root_filesystem == Some(true) {
            // The kubelet mounts no tmpfs over /tmp or /run; podman would, by default.
            flags.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
        }
        if cs.allow_privilege_escalation == Some(false) {
            flags.push("--security-opt=no-new-privileges".into());
        }
        for cap in cs.capabilities.iter().flat_map(|c| c.drop.iter().flatten()) {
            flags.push(format!("--cap-drop={}", cap.to_lowercase()));
        }
        let limits = self
            .container
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref());
        if let Some(memory) = limits.and_then(|l| l.get("memory")) {
            let gib = memory
                .0
                .strip_suffix("Gi")
                .ok_or_else(|| unsupported(format!("memory limit {} (only Gi)", memory.0)))?;
            flags.push(format!("--memory={gib}g"));
        }
        for env in self.container.env.iter().flatten() {
            let value = match (&env.value, &env.value_from) {
                (Some(v), _) => v.clone(),
                (None, Some(from)) => {
                    match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                        Some("metadata.name") => name.to_string(),
                        Some("metadata.namespace") => self.namespace.clone(),
                        Some(other) => {
                            return Err(unsupported(format!(
                                "env {} from field {other}",
                                env.name
                            )));
                        }
                        None => {
                            return Err(unsupported(format!(
                                "env {} from anything but a field",
                                env.name
                            )));
                        }
                    }
                }
                (None, None) => String::new(),
            };
            flags.push(format!("--env={}={value}", env.name));
        }
        flags.push(format!("--env=KUBERNETES_SERVICE_HOST={}", self.api.ip()));
        flags.push(format!("--env=KUBERNETES_SERVICE_PORT={}", self.api.port()));
        flags.push(format!(
            "--volume={}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
            self.dir.join("serviceaccount").display()
        ));
        for mount in self.container.volume_mounts.iter().flatten() {
            let shared = self
                .volumes
                .get(&mount.name)
                .ok_or_else(|| unsupported(format!("volume mount {} of no volume", mount.name)))?;
            let empty_dir = self
                .spec
                .volumes
                .iter()
                .flatten()
                .any(|v| v.name == mount.name && v.empty_dir.is_some());
            let mode = if mount.read_only == Some(true) {
                ":ro"
            } else {
                ""
            };
            let path = if !empty_dir {
                shared.clone()
            } else {
                // Each pod has emptyDirs of its own; the kubelet makes them as the shared one is.
                let own = shared.join(name);
                mkdir(&own)?;
                let meta = std::fs::metadata(shared).map_err(|source| Error::Io {
                    path: shared.clone(),
                    source,
                })?;
                std::os::unix::fs::chown(&own, None, Some(meta.gid())).map_err(|source| {
                    Error::Io {
                        path: own.clone(),
                        source,
                    }
                })?;
                std::fs::set_permissions(
                    &own,
                    std::fs::Permissions::from_mode(meta.mode() & 0o7777),
                )
                .map_err(|source| Error::Io {
                    path: own.clone(),
                    source,
                })?;
                own
            };
            flags.push(format!(
                "--volume={}:{}{mode}",
                path.display(),
                mount.mount_path
            ));
        }
        Ok(flags)
    }

    /// The container's args, with the one naming the `http` container port (`0.0.0.0:8080`,
    /// or `--listen=0.0.0.0:8080`) moved to `127.0.0.1:port`: the replicas share one network
    /// here, where pods would have one each. Refused if no arg names that port, since every
    /// replica would then bind the same one.
    pub fn args(&self, port: u16) -> Result<Vec<String>, Error> {
        let http = self
            .container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some("http"))
            .map(|p| format!(":{}", p.container_port));
        let mut moved = false;
        let args: Vec<String> = self
            .container
            .args
            .iter()
            .flatten()
            .map(|a| match &http {
                Some(http) if a.ends_with(http.as_str()) => {
                    moved = true;
                    let prefix = a
                        .rsplit_once('=')
                        .map(|(p, _)| format!("{p}="))
                        .unwrap_or_default();
                    format!("{prefix}127.0.0.1:{port}")
                }
                _ => a.clone(),
            })
            .collect();
        if !moved {
            return Err(Error::Unsupported {
                deployment: self.deployment.clone(),
                what: "args that do not name the container port called http".into(),
            });
        }
        Ok(args)
    }

    /// The readiness probe's HTTP path; None for a probe of another kind (exec, TCP, gRPC) too.
    pub fn readiness_path(&self) -> Option<&str> {
        let probe = self.container.readiness_probe.as_ref()?;
        probe.http_get.as_ref()?.path.as_deref()
    }

    /// The liveness probe's HTTP path; None for a probe of another kind (exec, TCP, gRPC) too.
    pub fn liveness_path(&self) -> Option<&str> {
        let probe = self.container.liveness_probe.as_ref()?;
        probe.http_get.as_ref()?.path.as_deref()
    }

    /// How long the kubelet waits after SIGTERM before SIGKILL (30 s unless the pod says).
    pub fn grace(&self) -> Duration {
        let seconds = self.spec.termination_grace_period_seconds.unwrap_or(30);
        Duration::from_secs(seconds.max(0) as u64)
    }
}

fn mkdir(path: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A plain HTTP/1.1 GET of `127.0.0.1:port` `path` on a fresh connection: the status and body,
/// or None while nothing answers, or nothing complete within 5 s. The body is returned as sent:
/// a chunked one keeps its chunk sizes.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    tokio::time::timeout(Duration::from_secs(5), get(port, path))
        .await
        .ok()
        .flatten()
}

async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf);
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    Some((status, body.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(dir: &Path) -> Pod {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "serviceAccountName": "host",
            "terminationGracePeriodSeconds": 10,
            "volumes": [{"name": "config", "configMap": {"name": "c"}}, {"name": "cache", "emptyDir": {}}],
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532},
            "containers": [{
                "name": "host",
                "image": "reconciled:0.1.0",
                "args": ["run", "--listen", "0.0.0.0:8080"],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "RUST_LOG", "value": "info"}
                ],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}},
                "resources": {"limits": {"memory": "1Gi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                },
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/reconciled", "readOnly": true},
                    {"name": "cache", "mountPath": "/var/cache/reconciled"}
                ]
            }]
        }))
        .unwrap();
        let volumes = ["config", "cache"]
            .into_iter()
            .map(|v| {
                let path = dir.join(v);
                std::fs::create_dir_all(&path).unwrap();
                (v.to_string(), path)
            })
            .collect();
        Pod {
            deployment: "ns/host".into(),
            namespace: "ns".into(),
            container: spec.containers[0].clone(),
            spec,
            dir: dir.to_path_buf(),
            volumes,
            api: "127.0.0.1:6443".parse().unwrap(),
        }
    }

    #[test]
    fn the_security_context_env_and_volumes_become_podman_flags() {
        let dir = tempfile::tempdir().unwrap();
        let pod = pod(dir.path());
        let flags = pod.flags("host-0").unwrap();
        for expected in [
            "--network=host",
            "--user=65532:65532",
            "--group-add=65532",
            "--read-only",
            "--read-only-tmpfs=false",
            "--security-opt=no-new-privileges",
            "--cap-drop=all",
            "--memory=1g",
            "--env=POD_NAME=host-0",
            "--env=POD_NAMESPACE=ns",
            "--env=RUST_LOG=info",
            "--env=KUBERNETES_SERVICE_HOST=127.0.0.1",
            "--env=KUBERNETES_SERVICE_PORT=6443",
        ] {
            assert!(
                flags.iter().any(|f| f == expected),
                "{expected} in {flags:?}"
            );
        }
        let config = format!(
            "--volume={}:/etc/reconciled:ro",
            dir.path().join("config").display()
        );
        assert!(flags.contains(&config), "{flags:?}");
        // Each replica its own emptyDir, beneath the shared one.
        let cache = dir.path().join("cache/host-0");
        assert!(flags.contains(&format!(
            "--volume={}:/var/cache/reconciled",
            cache.display()
        )));
        assert!(cache.is_dir());
        assert_eq!(pod.grace(), Duration::from_secs(10));
        assert_eq!(pod.readiness_path(), Some("/readyz"));
        assert_eq!(pod.liveness_path(), None);
    }

    #[test]
    fn the_http_port_moves_to_the_replicas_loopback_port() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            pod(dir.path()).args(9001).unwrap(),
            ["run", "--listen", "127.0.0.1:9001"]
        );
        let mut joined = pod(dir.path());
        joined.container.args = Some(vec!["run".into(), "--listen=0.0.0.0:8080".into()]);
        assert_eq!(
            joined.args(9001).unwrap(),
            ["run", "--listen=127.0.0.1:9001"]
        );
        joined.container.args = Some(vec!["run".into()]);
        let err = joined.args(9001).unwrap_err().to_string();
        assert!(
            err.contains("do not name the container port called http"),
            "{err}"
        );
    }

    #[test]
    fn an_env_from_anything_but_the_pods_name_or_namespace_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut pod = pod(dir.path());
        pod.container.env.as_mut().unwrap()[0]
            .value_from
            .as_mut()
            .unwrap()
            .field_ref
            .as_mut()
            .unwrap()
            .field_path = "status.podIP".into();
        let err = pod.flags("host-0").unwrap_err().to_string();
        assert!(
            err.contains("env POD_NAME from field status.podIP"),
            "{err}"
        );
    }
}
