"""The container engine of the image tests and benchmarks: podman from Debian's apt, with runc
(scripts/bootstrap-podman.sh installs both and builds the local base image). How a container
is run here (runtime, rlimits, network) is said once, in `run_command`.

The project image is built by scripts/build-image.sh (the build `make image` runs); the tests
build it once per test run (`session_image`), whatever the number of xdist workers."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .net import wait_for

ROOT = Path(__file__).resolve().parents[1]
ENGINE = "podman"
# crun cannot set resource limits on this machine; runc can.
RUNTIME = "runc"
# The base scripts/bootstrap-podman.sh builds with mmdebstrap from Debian's packages (no image
# registry is reachable here): bookworm minbase, python3, its venv module, useradd, CAs.
LOCAL_BASE = "localhost/txnwatch-base-bookworm"
# podman's default rlimits (nofile 1048576) are above this machine's hard limits, and a
# container may lower limits but not raise them.
ULIMITS = ("nofile=1024:4096", "nproc=1000:1000")
TEST_IMAGE = "localhost/txnwatch:test"
BUILD_TIMEOUT = 900.0


class EngineMissing(RuntimeError):
    pass


class PodmanError(subprocess.CalledProcessError):
    """A podman command that failed, with what podman said (CalledProcessError's text has not)."""

    def __str__(self) -> str:
        said = (self.stderr or self.stdout or "").strip()[-3000:]
        return f"{' '.join(map(str, self.cmd))}: exit {self.returncode}: {said}"


def podman(*args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run `podman --runtime runc ARGS`; a failure raises with podman's own words."""
    try:
        out = subprocess.run([ENGINE, "--runtime", RUNTIME, *args], capture_output=True, text=True,
                             timeout=timeout)
    except FileNotFoundError:
        raise EngineMissing("podman is missing: run `make bootstrap` (scripts/bootstrap-podman.sh)") from None
    if check and out.returncode != 0:
        raise PodmanError(out.returncode, out.args, out.stdout, out.stderr)
    return out


def run_command(image: str, name: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                mounts: Sequence[tuple[Path, str]] = (), options: Sequence[str] = (),
                detach: bool = True) -> list[str]:
    """The `podman run` arguments of a container of `image`: on the host network (containers
    talk to loopback addresses only: no bridge network here), within this machine's rlimits,
    files mounted read-only."""
    cmd = ["run", "--name", name, "--network", "host"]
    cmd += ["-d"] if detach else ["--rm"]
    for limit in ULIMITS:
        cmd += ["--ulimit", limit]
    for key, value in (env or {}).items():
        cmd += ["-e", f"{key}={value}"]
    for src, dst in mounts:
        cmd += ["-v", f"{src}:{dst}:ro"]
    return [*cmd, *options, image, *args]


@dataclass
class Container:
    """One detached container; `remove` takes it away whatever state it is in."""

    image: str
    name: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[tuple[Path, str]] = ()
    options: Sequence[str] = ()

    def start(self) -> Container:
        podman(*run_command(self.image, self.name, self.args, self.env, self.mounts, self.options))
        return self

    def inspect(self, template: str) -> str:
        return podman("container", "inspect", "--format", template, self.name).stdout.strip()

    def running(self) -> bool:
        return self.inspect("{{.State.Running}}") == "true"

    def logs(self) -> str:
        out = podman("logs", self.name, check=False)
        return out.stdout + out.stderr

    def until(self, condition: Callable[[], object], timeout: float = 120.0, what: str = "condition") -> object:
        """wait_for `condition`; a container that exits first fails at once, and every failure
        shows the container's log (what the exporter said is the first clue)."""
        exited = object()

        def check() -> object:
            return condition() if self.running() else exited

        try:
            value = wait_for(check, timeout, interval=0.5, what=f"{what} ({self.name})")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n--- log of {self.name}:\n{self.logs()[-4000:]}") from None
        if value is exited:
            raise AssertionError(f"{self.name} exited before {what}:\n{self.logs()[-4000:]}")
        return value

    def stop(self, seconds: int) -> int:
        """SIGTERM, SIGKILL after `seconds`; the container's exit code."""
        podman("stop", "--time", str(seconds), self.name, timeout=seconds + 60)
        return int(self.inspect("{{.State.ExitCode}}"))

    def remove(self) -> None:
        podman("rm", "--force", "--time", "0", self.name, check=False)


def image_inspect(image: str) -> dict:
    """What podman knows of the image: its Config (Env, Entrypoint, Cmd, User, Labels),
    Healthcheck, Size. Read whole: podman 4.3's `image inspect --format` cannot always reach
    Healthcheck."""
    return json.loads(podman("image", "inspect", image).stdout)[0]


def image_exists(image: str) -> bool:
    return podman("image", "exists", image, check=False).returncode == 0


def build_image(tag: str, base: str = LOCAL_BASE) -> str:
    """Build the project image as `make image` does (scripts/build-image.sh); its id."""
    if not image_exists(base):
        raise EngineMissing(f"the base image {base} is missing: run `make bootstrap` "
                            "(scripts/bootstrap-podman.sh builds it)")
    env = {**os.environ, "IMAGE": tag, "BASE_IMAGE": base}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "build-image.sh")], env=env, capture_output=True,
                         text=True, timeout=BUILD_TIMEOUT)
    if out.returncode != 0:
        raise RuntimeError(f"scripts/build-image.sh failed ({out.returncode}):\n{out.stdout[-4000:]}{out.stderr[-4000:]}")
    return out.stdout.split()[-1]       # the id it built (the tag may move on meanwhile)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def session_image(tag: str = TEST_IMAGE, base: str = LOCAL_BASE) -> str:
    """The project image of this test run, built once: xdist's workers share a run id, and the
    first to take the lock builds while the others wait, then read its id. podman's layer
    cache makes a build whose dependencies did not change take seconds."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    tmp = Path(tempfile.gettempdir())
    stamp = tmp / f"txnwatch-image-{run}.id"
    with _locked(tmp / "txnwatch-image.lock"):
        if stamp.is_file():
            return stamp.read_text().strip()
        for old in tmp.glob("txnwatch-image-*.id"):     # runs of past days (not a neighbour's)
            with contextlib.suppress(OSError):
                if time.time() - old.stat().st_mtime > 86400:
                    old.unlink()
        image_id = build_image(tag, base)
        stamp.write_text(image_id)
        _prune_old_builds()
        return image_id


def _prune_old_builds() -> None:
    """Every build leaves the images it replaced, and its stages, untagged: 200 MB or more a
    run. Those built on the local base (its label) over an hour ago go; the last hour's stay,
    as the layer cache of the next build."""
    podman("image", "prune", "--force", "--filter", "label=org.txnwatch.base.recipe", "--filter", "until=1h",
           check=False, timeout=300)
