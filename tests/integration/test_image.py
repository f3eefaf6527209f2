"""The exporter image, built as `make image` builds it (scripts/build-image.sh, here on the local
mmdebstrap base: no registry is reachable) and run by podman as users run it: non-root, a
read-only root filesystem, no capabilities, against a real broker."""

from __future__ import annotations

import re
import subprocess
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import txnwatch
from txnwatch.config.env import OVERRIDES
from txnwatch.config.schema import ROOT as CONFIG_ROOT
from txnwatch_dev.container import Container, image_inspect, podman, run_command, session_image
from txnwatch_dev.net import free_port, port_open

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
CONFIG_PATH = "/etc/txnwatch/txnwatch.yaml"
# How the tests run every exporter container: as production should.
HARDENED = ("--read-only", "--cap-drop=all")


@dataclass
class Exporter:
    """A container of the module and the port it should serve on; `unused` are the ports
    its lower-precedence sources named."""

    container: Container
    port: int
    unused: tuple[int, ...] = ()

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return r.read().decode()

    def wait_ready(self) -> None:
        self.container.until(lambda: self.get("/healthz"), what=f"/healthz on port {self.port}")


@pytest.fixture(scope="module")
def image() -> str:
    """The project image's id, built once per test run."""
    return session_image()


def _config_file(directory: Path, port: int, broker) -> Path:
    path = directory / f"txnwatch-{port}.yaml"
    path.write_text(yaml.safe_dump({"http": {"port": port},
                                    "clusters": [{"name": "image", "bootstrap_servers": broker.bootstrap}]}))
    path.chmod(0o644)       # the container's UID 10001 reads it
    return path


@pytest.fixture(scope="module")
def exporters(image, broker, tmp_path_factory):
    """Every exporter container of the module, started at once (they boot side by side; each
    test waits for its own) and removed at teardown, whatever the tests did."""
    files = tmp_path_factory.mktemp("image-config")
    token = uuid.uuid4().hex[:8]
    started: list[Container] = []

    def start(key: str, env: dict[str, str], args: tuple[str, ...] = (), file_port: int | None = None) -> Container:
        mounts = [(_config_file(files, file_port, broker), CONFIG_PATH)] if file_port else []
        env = {**env, "TXNWATCH_CONFIG": CONFIG_PATH} if file_port else env
        c = Container(image, f"txnwatch-test-{token}-{key}", args, env, mounts, HARDENED)
        started.append(c)
        return c.start()

    plain = {"TXNWATCH_BOOTSTRAP_SERVERS": broker.bootstrap, "TXNWATCH_CLUSTER_NAME": "image"}
    out = {}
    try:
        for key in ("serving", "health", "sigterm"):
            port = free_port()
            out[key] = Exporter(start(key, {**plain, "TXNWATCH_PORT": str(port)}), port)
        file1, file2, env2, file3, env3, flag3 = (free_port() for _ in range(6))
        out["file"] = Exporter(start("file", {}, file_port=file1), file1)
        out["file+env"] = Exporter(start("file-env", {"TXNWATCH_PORT": str(env2)}, file_port=file2), env2, (file2,))
        out["file+env+flag"] = Exporter(start("file-env-flag", {"TXNWATCH_PORT": str(env3)},
                                              ("serve", "--port", str(flag3)), file_port=file3), flag3, (file3, env3))
        yield out
    finally:
        for container in started:
            container.remove()


def test_serves_metrics_of_a_real_broker(exporters, image):
    serving = exporters["serving"]
    up = re.compile(r'^txnwatch_up\{kafka_cluster="image",source="poller"\} 1(\.0)?$', re.M)
    body = serving.container.until(lambda: (b := serving.get("/metrics")) and up.search(b) and b,
                                   what="txnwatch_up 1 from the broker")
    assert re.search(r'^kafka_cluster_brokers\{kafka_cluster="image"\} 1(\.0)?$', body, re.M), body[-3000:]
    revision = image_inspect(image)["Config"]["Labels"]["org.opencontainers.image.revision"]
    assert revision not in ("", "unknown")
    assert re.search(rf'^txnwatch_build_info\{{[^}}]*revision="{re.escape(revision)}"', body, re.M), body[-3000:]


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_runs_as_10001_without_capabilities_on_a_read_only_root(exporters):
    serving = exporters["serving"]
    serving.wait_ready()
    pids = podman("top", serving.container.name, "hpid").stdout.split()[1:]
    assert len(pids) >= 2, pids          # the server and its cluster's worker process
    for pid in map(int, pids):
        status = _status(pid)
        assert status["Uid"].split() == ["10001"] * 4, (pid, status["Uid"])
        assert {status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {"0000000000000000"}, pid
    write = podman("exec", serving.container.name, "python3", "-c", "open('/opt/txnwatch/probe', 'w')", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write.stderr
    # what it writes (the worker processes' files) is in the tmpfs podman mounts on /tmp with --read-only
    written = podman("exec", serving.container.name, "find", "/tmp", "-mindepth", "1", "-user", "10001").stdout
    assert written.split(), "nothing written to /tmp"


def _probe(image: str, target: Exporter) -> subprocess.CompletedProcess:
    """The image's HEALTHCHECK command, as its config says it, run in a second container
    with the target's environment, on the same (host) network."""
    test = image_inspect(image)["Healthcheck"]["Test"]
    assert test[0] == "CMD", test
    name = f"{target.container.name}-probe-{uuid.uuid4().hex[:6]}"
    cmd = run_command(image, name, test[2:], target.container.env, detach=False,
                      options=(*HARDENED, "--entrypoint", test[1]))
    return podman(*cmd, check=False)


def test_healthcheck_passes_while_serving_and_fails_once_stopped(exporters, image):
    health = exporters["health"]
    health.wait_ready()
    # podman kept the HEALTHCHECK (a docker-format image) and runs it in the container
    assert podman("healthcheck", "run", health.container.name, check=False).returncode == 0
    assert _probe(image, health).returncode == 0
    health.container.stop(10)
    probe = _probe(image, health)
    assert probe.returncode != 0 and str(health.port) in probe.stdout + probe.stderr, probe


def test_sigterm_stops_it_cleanly_within_ten_seconds(exporters):
    sigterm = exporters["sigterm"]
    sigterm.wait_ready()
    # podman stop sends SIGTERM, then SIGKILL at 10 s: 137 would say it was killed
    assert sigterm.container.stop(10) == 0, sigterm.container.logs()[-3000:]
    assert "received SIGTERM, shutting down" in sigterm.container.logs()


@pytest.mark.parametrize("sources", ["file", "file+env", "file+env+flag"])
def test_port_from_file_then_environment_then_flag(exporters, sources):
    """docs/configuration.md's order: flags > TXNWATCH_* environment > file > defaults; the
    image's own environment overrides nothing. The HEALTHCHECK probes the port that won."""
    exporter = exporters[sources]
    exporter.wait_ready()
    assert not [p for p in exporter.unused if port_open("127.0.0.1", p)], exporter.unused
    health = podman("healthcheck", "run", exporter.container.name, check=False)
    assert health.returncode == 0, (health, exporter.container.logs()[-2000:])


def test_image_config_sets_no_configuration(image):
    config = image_inspect(image)["Config"]
    txnwatch_env = [e for e in config["Env"] if e.startswith("TXNWATCH_")]
    assert [e.partition("=")[0] for e in txnwatch_env] == [txnwatch.REVISION_ENV], txnwatch_env
    revision_key = txnwatch.REVISION_ENV.removeprefix("TXNWATCH_").lower()   # build metadata, not a key
    assert revision_key not in OVERRIDES and revision_key not in CONFIG_ROOT.names
    assert config["User"] == "10001"
    assert config["Entrypoint"] == ["txnwatch"] and config["Cmd"] == ["serve"]
    assert config["Labels"]["org.opencontainers.image.version"] == txnwatch.__version__


def test_image_holds_the_pinned_packages_and_no_harness(image):
    script = ("pip freeze; echo ---; python3 -c \"import importlib.util as u; "
              "print(u.find_spec('txnwatch_dev'), u.find_spec('txnwatch.devtools'))\"; echo ---; head -c 200 LICENSE")
    cmd = run_command(image, f"txnwatch-test-contents-{uuid.uuid4().hex[:8]}", ("-c", script), detach=False,
                      options=(*HARDENED, "--entrypoint", "sh"))
    frozen, specs, license_text = podman(*cmd).stdout.split("---\n")
    pinned = {line.split("==")[0].lower(): line.split("==")[1]
              for line in (REPO / "requirements/exporter.txt").read_text().splitlines() if "==" in line}
    installed = dict(line.lower().split("==") for line in frozen.split("\n") if "==" in line)
    projects = [line for line in frozen.split("\n") if line and "==" not in line]   # `name @ URL`
    assert installed == pinned and [p.split(" @ ")[0] for p in projects] == ["txnwatch"], frozen
    assert f"/txnwatch-{txnwatch.__version__}-py3-none-any.whl" in projects[0], projects
    assert specs.split() == ["None", "None"], specs
    assert license_text.lstrip().startswith("Apache License")
