//! The Kubernetes manifests in `deploy/kubernetes/`: valid for the API
//! versions that have native sidecars (checked by `kubernetes-validate`,
//! strict, with the schemas it ships), and consistent with the sidecar they
//! run — its flags, its image's user, its drain deadline, its memory budget.

use crate::docker::IMAGE_UID;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The first Kubernetes version whose native sidecars (an init container with
/// `restartPolicy: Always`) are on by default.
const NATIVE_SIDECARS_FROM: &str = "1.29.0";

/// Memory the sidecar's container needs beyond its guest budget
/// (`--total-memory-mib`): see `deploy/kubernetes/README.md`.
const OVERHEAD_MIB: u64 = 128;

fn python() -> String {
    std::env::var("TETHER_PYTHON").unwrap_or_else(|_| {
        panic!(
            "TETHER_PYTHON is not set: run the tests via `./x test`, which installs kubernetes-validate into target/py"
        )
    })
}

/// `kubernetes-validate --strict ARGS`.
fn validate(args: &[&str], files: &[PathBuf]) -> Output {
    let output = Command::new(python())
        .args(["-m", "kubernetes_validate", "--strict"])
        .args(args)
        .args(files)
        .output()
        .expect("the Python in TETHER_PYTHON runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named kubernetes_validate"),
        "kubernetes-validate is not installed: run the tests via `./x test`, which installs it into target/py"
    );
    output
}

fn report(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn manifests() -> Vec<PathBuf> {
    let dir = crate::repo_root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in `{}`", dir.display());
    files
}

/// Every document of a YAML file, as JSON (parsed by the validator's own PyYAML).
fn documents(path: &Path) -> Vec<Value> {
    let output = Command::new(python())
        .args(["-c", "import json, sys, yaml; json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)"])
        .arg(path)
        .output()
        .expect("the Python in TETHER_PYTHON runs");
    assert!(output.status.success(), "`{}` does not parse: {}", path.display(), report(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn every_manifest_is_valid_kubernetes_with_native_sidecars_and_now() {
    for version in [NATIVE_SIDECARS_FROM, "latest"] {
        let args: &[&str] = if version == "latest" { &[] } else { &["--kubernetes-version", version] };
        let output = validate(args, &manifests());
        assert!(output.status.success(), "invalid for Kubernetes {version}:\n{}", report(&output));
    }
}

/// The check above could pass by accident (no strictness, no version in
/// effect); these show it would not: a misspelled field fails, and the
/// native sidecar fails against the API before it existed.
#[test]
fn the_validator_rejects_a_misspelled_field_and_a_native_sidecar_before_1_29() {
    let manifest = crate::repo_root().join("deploy/kubernetes/agent-backend.yaml");
    let misspelled =
        std::fs::read_to_string(&manifest).unwrap().replacen("readOnlyRootFilesystem:", "readOnlyRootFileSystem:", 1);
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, misspelled).unwrap();
    let output = validate(&["--kubernetes-version", NATIVE_SIDECARS_FROM], &[broken]);
    assert!(!output.status.success() && report(&output).contains("readOnlyRootFileSystem"), "{}", report(&output));

    let output = validate(&["--kubernetes-version", "1.27.0"], &[manifest]);
    assert!(!output.status.success() && report(&output).contains("restartPolicy"), "{}", report(&output));
}

/// The sidecar container of the agent backend's pod template.
struct SidecarSpec {
    pod: Value,
    container: Value,
}

impl SidecarSpec {
    fn load() -> SidecarSpec {
        let docs = documents(&crate::repo_root().join("deploy/kubernetes/agent-backend.yaml"));
        let deployment = docs.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
        let pod = deployment["spec"]["template"]["spec"].clone();
        let container = pod["initContainers"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == "tether-sidecar"))
            .expect("the sidecar is an init container")
            .clone();
        SidecarSpec { pod, container }
    }

    fn args(&self) -> Vec<String> {
        self.container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect()
    }

    /// The value of `--name=value` in the container's args.
    fn flag(&self, name: &str) -> String {
        let prefix = format!("--{name}=");
        self.args()
            .iter()
            .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("no `{prefix}…`"))
    }

    fn env(&self, name: &str) -> String {
        let env = self.container["env"].as_array().unwrap();
        let var = env.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no env `{name}`"));
        var["value"].as_str().unwrap().to_owned()
    }
}

fn mebibytes(quantity: &Value) -> u64 {
    let text = quantity.as_str().unwrap_or_else(|| panic!("a quantity: {quantity}"));
    text.strip_suffix("Mi").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("`{text}` is not in Mi"))
}

#[test]
fn the_sidecar_is_a_native_sidecar_probed_on_its_health_port() {
    let spec = SidecarSpec::load();
    assert_eq!(spec.container["restartPolicy"], "Always", "a native sidecar");
    let health = spec.flag("health-listen");
    let port: u64 = health.rsplit(':').next().unwrap().parse().unwrap();
    for (probe, service) in
        [("startupProbe", "tether.v1.Sidecar"), ("readinessProbe", "tether.v1.Sidecar"), ("livenessProbe", "liveness")]
    {
        let grpc = &spec.container[probe]["grpc"];
        assert_eq!((grpc["port"].as_u64(), grpc["service"].as_str()), (Some(port), Some(service)), "{probe}");
    }
    // The socket: in the directory both containers mount from one emptyDir.
    let socket = PathBuf::from(spec.flag("socket"));
    let socket_dir = socket.parent().unwrap().to_str().unwrap();
    let volume =
        spec.pod["volumes"].as_array().unwrap().iter().find(|v| v["emptyDir"].is_object()).expect("an emptyDir");
    let containers = spec.pod["containers"].as_array().unwrap().iter().chain([&spec.container]);
    for container in containers {
        let mounts = container["volumeMounts"].as_array().unwrap();
        assert!(
            mounts.iter().any(|m| m["name"] == volume["name"] && m["mountPath"] == socket_dir),
            "`{}` mounts the socket's emptyDir at `{socket_dir}`",
            container["name"]
        );
    }
}

#[test]
fn the_pod_outlasts_the_drain_and_the_sidecar_its_memory_budget() {
    let spec = SidecarSpec::load();
    let drain: u64 = spec.env("TETHER_DRAIN_DEADLINE_SECONDS").parse().unwrap();
    let grace = spec.pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(grace > drain, "terminationGracePeriodSeconds `{grace}` must exceed the drain deadline `{drain}`");

    let guests: u64 = spec.flag("total-memory-mib").parse().unwrap();
    let resources = &spec.container["resources"];
    assert_eq!(mebibytes(&resources["limits"]["memory"]), guests + OVERHEAD_MIB, "limit = guest budget + overhead");
    assert_eq!(resources["requests"]["memory"], resources["limits"]["memory"], "the budget is reserved, not borrowed");
}

#[test]
fn the_pod_runs_as_the_images_user_with_nothing_it_does_not_need() {
    let spec = SidecarSpec::load();
    let pod = &spec.pod["securityContext"];
    assert_eq!(pod["runAsNonRoot"], true);
    assert_eq!(pod["runAsUser"].as_u64(), Some(u64::from(IMAGE_UID)), "the user `deploy/Dockerfile` sets");
    assert_eq!(pod["seccompProfile"]["type"], "RuntimeDefault");
    for container in spec.pod["containers"].as_array().unwrap().iter().chain([&spec.container]) {
        let context = &container["securityContext"];
        assert_eq!(context["readOnlyRootFilesystem"], true, "{}", container["name"]);
        assert_eq!(context["allowPrivilegeEscalation"], false, "{}", container["name"]);
        assert_eq!(context["capabilities"]["drop"], serde_json::json!(["ALL"]), "{}", container["name"]);
    }
}

/// The manifest's command line is one the sidecar accepts: the same args,
/// with `--prepare-cache` (which parses them all, then only fills the cache).
#[test]
fn the_sidecar_accepts_the_manifests_args_and_env() {
    let spec = SidecarSpec::load();
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tether-cache");
    let output = Command::new(env!("CARGO_BIN_EXE_tether-sidecar"))
        .args(spec.args())
        .arg("--prepare-cache")
        .arg("--cache-dir")
        .arg(&cache)
        .env("TETHER_DRAIN_DEADLINE_SECONDS", spec.env("TETHER_DRAIN_DEADLINE_SECONDS"))
        .output()
        .unwrap();
    assert!(output.status.success(), "the sidecar rejects the manifest's command line:\n{}", report(&output));
}
