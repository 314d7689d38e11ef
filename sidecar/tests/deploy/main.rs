//! The deployment files under `deploy/`, tested for real: the sidecar image
//! built from `deploy/Dockerfile` and run with Docker, a backend outside the
//! container driving it over a Unix socket in a shared volume and over TCP
//! (`container`), and the Kubernetes manifests checked by a schema validator
//! and against the sidecar's own flags (`kubernetes`).
//!
//! Needs a Docker daemon (`DOCKER_HOST`, and `TETHER_DOCKER` naming a CLI
//! whose `build` speaks BuildKit) and `kubernetes-validate` beside
//! `TETHER_PYTHON`: `./x test` sets up both (`tools/services/docker.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod container;
mod docker;
mod grpc;
mod kubernetes;

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the sidecar crate sits in the repository").to_path_buf()
}
