"""Shared fixtures: the package (built by `./x test`), the demo world's
tools in Python, a `tether-sidecar` process on a Unix socket, and the park
key file every embedded sidecar of the session seals parked runs with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
HOW = "run the Python tests through `./x test` (it builds the extension and installs what they need into target/py)"

try:
    import tether  # noqa: F401
except ImportError as error:  # pragma: no cover - only without the build
    raise pytest.UsageError(f"the `tether` package is not installed ({error}); {HOW}") from error


def cli_binary() -> Path:
    """The `tether` command cargo built (`./x test` builds it before pytest)."""
    path = Path(os.environ.get("TETHER_CLI_BIN") or REPO / "target" / "debug" / "tether")
    if not path.is_file():
        pytest.fail(f"no `tether` binary at `{path}`; {HOW}")
    return path


def sidecar_binary() -> Path:
    """The `tether-sidecar` that `cargo test` built."""
    path = Path(os.environ.get("TETHER_SIDECAR_BIN") or REPO / "target" / "debug" / "tether-sidecar")
    if not path.is_file():
        pytest.fail(f"no sidecar binary at `{path}`; {HOW}")
    return path


def wait_ready(socket: Path, process: subprocess.Popen) -> None:
    """Waits on gRPC health `Watch("")` over the socket until the sidecar
    says SERVING: no sleeping, no polling."""
    try:
        import grpc
    except ImportError:
        pytest.fail(f"grpcio is missing; {HOW}")
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        watch = channel.unary_stream("/grpc.health.v1.Health/Watch")
        # HealthCheckRequest{service: ""} is empty; a response's field 1 is
        # the status, SERVING = 1: b"\x08\x01".
        for response in watch(b"", timeout=120):
            if response == b"\x08\x01":
                return
            if process.poll() is not None:
                break
    pytest.fail(f"the sidecar at {socket} never became ready (exit code {process.poll()})")


@pytest.fixture(scope="session", autouse=True)
def park_key_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The park key file of the session (`$TETHER_PARK_KEY_FILE`), in a
    temporary directory: the embedded sidecar is one per process and its key
    is fixed when it starts, so it is set before any test starts one, and
    the processes the tests start inherit it (they resume what this one
    parked)."""
    path = tmp_path_factory.mktemp("park") / "park.key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TETHER_PARK_KEY_FILE", str(path))
        yield path


@pytest.fixture(scope="session")
def sidecar_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `tether-sidecar --socket PATH` process for the session: its address."""
    socket = tmp_path_factory.mktemp("sidecar") / "tether.sock"
    process = subprocess.Popen(
        [str(sidecar_binary()), "--socket", str(socket)],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on unix:"), f"the sidecar said {line!r} (exit code {process.poll()})"
        wait_ready(socket, process)
        yield f"unix:{socket}"
    finally:
        process.terminate()
        process.wait(timeout=60)


@pytest.fixture(params=["embedded", "unix-socket"])
def sidecar(request: pytest.FixtureRequest) -> str:
    """Where scripts run: the embedded sidecar, and a sidecar process."""
    if request.param == "embedded":
        return tether.EMBEDDED
    return str(request.getfixturevalue("sidecar_socket"))
