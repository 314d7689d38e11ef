//! Docker from a test: the daemon `./x test` starts, the sidecar image built
//! once per process from `deploy/Dockerfile`, and containers that are removed
//! however a test ends.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const SETUP_HINT: &str = "run the tests via `./x test`, which starts a private Docker daemon \
     (`tools/services/docker.sh start`) and exports DOCKER_HOST and TETHER_DOCKER";

/// The user the image runs as (`USER` in `deploy/Dockerfile`).
pub const IMAGE_UID: u32 = 65532;

/// A Docker CLI talking to the daemon the test setup started.
#[derive(Debug, Clone)]
pub struct Docker {
    cli: String,
}

impl Docker {
    /// The daemon at `DOCKER_HOST`, through the CLI `TETHER_DOCKER` names.
    ///
    /// # Panics
    /// Saying how to start one, if there is none.
    pub fn connect() -> Docker {
        let host = std::env::var("DOCKER_HOST").unwrap_or_else(|_| panic!("DOCKER_HOST is not set: {SETUP_HINT}"));
        let cli = std::env::var("TETHER_DOCKER").unwrap_or_else(|_| panic!("TETHER_DOCKER is not set: {SETUP_HINT}"));
        let docker = Docker { cli };
        if let Err(error) = docker.try_run(&["info", "--format", "{{.ServerVersion}}"]) {
            panic!("no Docker daemon answers at `{host}` ({error}): {SETUP_HINT}");
        }
        docker
    }

    /// `docker ARGS`, not yet run.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.cli);
        command.args(args);
        command
    }

    /// Runs `docker ARGS` and returns its stdout, trimmed.
    pub fn try_run(&self, args: &[&str]) -> Result<String, String> {
        let output = self.command(args).output().map_err(|e| format!("cannot run `{}`: {e}", self.cli))?;
        checked(&format!("docker {}", args.join(" ")), output)
    }

    /// Runs `docker ARGS` and returns its stdout, trimmed.
    ///
    /// # Panics
    /// If it fails, with what it printed.
    pub fn run(&self, args: &[&str]) -> String {
        self.try_run(args).unwrap_or_else(|error| panic!("{error}"))
    }
}

fn checked(what: &str, output: Output) -> Result<String, String> {
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(format!(
            "`{what}` failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The sidecar image, built once per process by [`build_sidecar_image`].
///
/// # Panics
/// If the build failed, with the build's output.
pub fn sidecar_image(docker: &Docker) -> &'static str {
    static IMAGE: OnceLock<Result<String, String>> = OnceLock::new();
    match IMAGE.get_or_init(|| build_sidecar_image(docker)) {
        Ok(tag) => tag,
        Err(error) => panic!("building the sidecar image failed: {error}"),
    }
}

/// Builds `deploy/Dockerfile` as a user would, but offline: no registry is
/// reachable, so the runtime stage's base is an image made here from the C
/// libraries the sidecar binary links, and the binary is the one this test
/// suite built (`SIDECAR_FROM`), so BuildKit skips the compile stage. Every
/// other step — the binary's place, the compile cache filled by
/// `--prepare-cache`, the user, the socket directory, the entrypoint — is the
/// Dockerfile's own.
fn build_sidecar_image(docker: &Docker) -> Result<String, String> {
    let binary = Path::new(env!("CARGO_BIN_EXE_tether-sidecar"));
    let started = Instant::now();
    let base = import_image(docker, "tether-test/runtime-base", &shared_libraries(binary)?, &[])?;
    let from = import_image(docker, "tether-test/sidecar-binary", &[], &[(binary, "usr/local/bin/tether-sidecar")])?;
    let root = crate::repo_root();
    let dockerfile = root.join("deploy/Dockerfile");
    let tag = "tether-test/sidecar";
    let output = docker
        .command(&["build", "--network", "none", "--tag", tag])
        .args(["--build-arg", &format!("RUNTIME_IMAGE={base}"), "--build-arg", &format!("SIDECAR_FROM={from}")])
        .arg("--file")
        .arg(&dockerfile)
        .arg(&root)
        .env("DOCKER_BUILDKIT", "1")
        .output()
        .map_err(|e| format!("cannot run docker build: {e}"))?;
    checked("docker build deploy/Dockerfile", output)?;
    eprintln!("built `{tag}` in {:.1} s", started.elapsed().as_secs_f64());
    Ok(tag.to_owned())
}

/// The absolute paths of the shared libraries `binary` loads, the dynamic
/// loader included, as `ldd` lists them.
fn shared_libraries(binary: &Path) -> Result<Vec<String>, String> {
    let output = Command::new("ldd").arg(binary).output().map_err(|e| format!("cannot run ldd: {e}"))?;
    let listing = checked("ldd", output)?;
    // Lines are `name => /path (address)`, `/path (address)` or, for the
    // vDSO, `name (address)`.
    Ok(listing
        .lines()
        .filter_map(|line| line.split_whitespace().find(|word| word.starts_with('/')))
        .map(str::to_owned)
        .collect())
}

/// Imports a one-layer image `tag` holding `host_paths` at their own paths
/// and each `(file, path)` of `renamed` at `path`.
fn import_image(
    docker: &Docker,
    tag: &str,
    host_paths: &[String],
    renamed: &[(&Path, &str)],
) -> Result<String, String> {
    let rootfs = tempfile::tempdir().map_err(|e| e.to_string())?;
    let placed = host_paths
        .iter()
        .map(|path| (Path::new(path.as_str()), path.trim_start_matches('/')))
        .chain(renamed.iter().copied());
    for (source, path) in placed {
        let target = rootfs.path().join(path);
        std::fs::create_dir_all(target.parent().expect("a file's path has a parent")).map_err(|e| e.to_string())?;
        // Follows symlinks (e.g. /lib64/ld-linux-x86-64.so.2): the image gets the file.
        std::fs::copy(source, &target).map_err(|e| format!("cannot copy `{}`: {e}", source.display()))?;
    }
    let tarball = rootfs.path().with_extension("tar");
    let tar = Command::new("tar")
        .arg("-C")
        .arg(rootfs.path())
        .arg("-cf")
        .arg(&tarball)
        .arg(".")
        .output()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    checked("tar", tar)?;
    let imported = docker.try_run(&["import", tarball.to_str().expect("a temporary path is UTF-8"), tag]);
    let _ = std::fs::remove_file(&tarball);
    imported?;
    Ok(tag.to_owned())
}

/// A container started by a test, removed (with its anonymous volumes) when
/// dropped, however the test ends.
#[derive(Debug)]
pub struct Container {
    docker: Docker,
    /// The container's id.
    pub id: String,
    /// When `docker run` was called.
    pub started: Instant,
}

impl Container {
    /// `docker run --detach OPTIONS IMAGE ARGS`.
    pub fn run(docker: &Docker, options: &[&str], image: &str, args: &[&str]) -> Container {
        let started = Instant::now();
        let mut all = vec!["run", "--detach"];
        all.extend_from_slice(options);
        all.push(image);
        all.extend_from_slice(args);
        let id = docker.run(&all);
        Container { docker: docker.clone(), id, started }
    }

    /// What the container printed so far: (stdout, stderr).
    pub fn logs(&self) -> (String, String) {
        match self.docker.command(&["logs", &self.id]).output() {
            Ok(output) => (
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ),
            Err(error) => (String::new(), format!("cannot read the logs: {error}")),
        }
    }

    /// Whether the container's process still runs.
    pub fn running(&self) -> bool {
        self.inspect("{{.State.Running}}") == "true"
    }

    /// `docker inspect --format FORMAT` of the container.
    pub fn inspect(&self, format: &str) -> String {
        self.docker.run(&["inspect", "--format", format, &self.id])
    }

    /// The container's main process as the host sees it.
    pub fn host_pid(&self) -> u32 {
        self.inspect("{{.State.Pid}}").parse().expect("docker inspect gives a pid")
    }

    /// Sends `signal` (e.g. `TERM`) to the container's main process.
    pub fn signal(&self, signal: &str) {
        self.docker.run(&["kill", "--signal", signal, &self.id]);
    }

    /// Waits for the container to stop and returns its exit code.
    pub fn wait(&self) -> i32 {
        self.docker.run(&["wait", &self.id]).parse().expect("docker wait gives an exit code")
    }

    /// Waits up to `timeout` for a stdout line starting with `prefix` and
    /// returns the rest of it.
    ///
    /// # Panics
    /// If the container stops or the time passes first, with its logs.
    pub fn line_after(&self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let (stdout, _) = self.logs();
            if let Some(rest) = stdout.lines().find_map(|line| line.strip_prefix(prefix)) {
                return rest.trim().to_owned();
            }
            if !self.running() || Instant::now() > deadline {
                self.fail(&format!("the container printed no line starting with `{prefix}`"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Panics with `message` and the container's logs.
    pub fn fail(&self, message: &str) -> ! {
        let (stdout, stderr) = self.logs();
        panic!("{message}\n--- container stdout ---\n{stdout}\n--- container stderr ---\n{stderr}")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.docker.command(&["rm", "--force", "--volumes", &self.id]).output();
    }
}
