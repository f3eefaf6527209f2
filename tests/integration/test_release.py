"""What `make release` writes (scripts/release.sh, here on the local mmdebstrap base: no registry
is reachable), each artifact installed or loaded from its directory and run as a user would:
the wheel into a fresh venv against a real broker (its `spark` extra resolved), the sdist
building the same wheel, the chart rendered from its package, the image loaded from its OCI
archive into a podman store of its own and run against the broker, the SBOM valid and true to
the image, SHA256SUMS checking them all."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.integration.helm_helpers import render, workload
from txnwatch import __version__
from txnwatch_dev.container import LOCAL_BASE, podman, run_command
from txnwatch_dev.net import free_port, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CHART_VERSION = yaml.safe_load((ROOT / "charts" / "txnwatch" / "Chart.yaml").read_text())["version"]
WHEEL = f"txnwatch-{__version__}-py3-none-any.whl"
SDIST = f"txnwatch-{__version__}.tar.gz"
CHART = f"txnwatch-{CHART_VERSION}.tgz"
IMAGE_ARCHIVE = f"txnwatch-{__version__}.oci.tar"
SBOM = f"txnwatch-{__version__}.cdx.json"
IMAGE = f"localhost/txnwatch:{__version__}"
# The sink's JVM writer: built by scripts/build-sink-jar.sh, ignored by git, shipped in the wheel.
SINK_JAR = "txnwatch/spark_listener/sink/jars/txnwatch-spark-sink.jar"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "dist"
    run = subprocess.run(["bash", str(ROOT / "scripts" / "release.sh")], capture_output=True, text=True, timeout=1200,
                         env={**os.environ, "DIST_DIR": str(out), "BASE_IMAGE": LOCAL_BASE, "PYTHON": sys.executable})
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_sha256sums_check_every_artifact_and_nothing_else(dist):
    listed = sorted(line.split(None, 1)[1] for line in (dist / "SHA256SUMS").read_text().splitlines())
    assert listed == sorted([WHEEL, SDIST, CHART, IMAGE_ARCHIVE, SBOM])
    assert sorted(p.name for p in dist.iterdir()) == sorted([*listed, "SHA256SUMS"])
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 5, check.stdout + check.stderr


# ---------------------------------------------------------------- the wheel and the sdist
def test_the_wheel_holds_the_package_and_no_harness(dist):
    names = set(zipfile.ZipFile(dist / WHEEL).namelist())
    harness = sorted(n for n in names if n.startswith("txnwatch_dev/") or "/devtools/" in n)
    assert not harness, f"harness modules in the wheel: {harness}"
    assert {n.split("/")[0] for n in names} == {"txnwatch", f"txnwatch-{__version__}.dist-info"}
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "txnwatch").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert "txnwatch/exporter/spark/openapi-ingest.yaml" in names
    assert SINK_JAR in names
    assert f"txnwatch-{__version__}.dist-info/licenses/LICENSE" in names


def _contents(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist()}


def _git_files() -> list[str]:
    """The files of the checkout git knows (tracked, or new and not ignored) that exist."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout.decode()
    return [n for n in out.split("\0") if n and (ROOT / n).is_file()]


def test_the_sdist_builds_a_wheel_with_the_same_files_as_the_checkout(dist, tmp_path):
    """The released wheel is built from the sdist: a file the sdist left out would be missing
    from it but present in a wheel built straight from the checkout."""
    src, direct = tmp_path / "src", tmp_path / "direct"
    for name in [*_git_files(), SINK_JAR]:        # what scripts/dist-python.sh copies
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(direct), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    from_sdist, from_checkout = _contents(dist / WHEEL), _contents(direct / WHEEL)
    assert sorted(from_sdist) == sorted(from_checkout)
    differ = sorted(n for n in from_sdist if from_sdist[n] != from_checkout[n])
    assert not differ, f"files that differ between the wheel from {SDIST} and from the checkout: {differ}"


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory, dist) -> Path:
    """A venv with nothing but pip, and the wheel installed into it from dist/ as a user would."""
    env_dir = tmp_path_factory.mktemp("venv") / "v"
    venv.create(env_dir, with_pip=True)
    out = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", str(dist / WHEEL)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return env_dir


def _metrics(port: int) -> str | None:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None


def _up(cluster: str) -> re.Pattern:
    return re.compile(rf'^txnwatch_up\{{kafka_cluster="{cluster}",source="poller"\}} 1(\.0)?$', re.M)


def test_the_wheel_in_a_fresh_venv_serves_a_broker(fresh_venv, broker, tmp_path):
    bin_dir = fresh_venv / "bin"
    version = subprocess.run([str(bin_dir / "txnwatch"), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith(f"txnwatch {__version__} (revision unknown)"), version.stdout
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TXNWATCH_", "PYTHON"))}
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(bin_dir / "txnwatch"), "serve", "--bootstrap-servers", broker.bootstrap,
                                 "--cluster-name", "wheel", "--port", str(port)],
                                env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin"}, cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        def polled() -> str | None:
            assert proc.poll() is None, log.read_text()
            body = _metrics(port)
            return body if body and _up("wheel").search(body) else None

        body = wait_for(polled, 60, what="the wheel's exporter to poll the broker")
        assert "kafka_cluster_brokers" in body
        where = subprocess.run([str(bin_dir / "python"), "-c", "import txnwatch; print(txnwatch.__file__)"],
                               capture_output=True, text=True, check=True, cwd=tmp_path).stdout
        assert where.startswith(str(fresh_venv)), where       # the installed package, not the checkout's
    finally:
        proc.terminate()
        assert proc.wait(15) == 0, log.read_text()


def test_the_spark_extra_resolves(fresh_venv, dist, tmp_path):
    report = tmp_path / "report.json"
    out = subprocess.run([str(fresh_venv / "bin" / "pip"), "install", "--dry-run", "-q", "--report", str(report),
                          f"{dist / WHEEL}[spark]"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    to_install = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert {"pyspark", "pyarrow", "pandas"} <= to_install, to_install


# ---------------------------------------------------------------- the chart
def test_the_chart_package_installs_the_released_image(dist):
    docs = render(None, "image.repository=registry.example.com/txnwatch", chart=dist / CHART)
    (container,) = workload(docs)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.example.com/txnwatch:{__version__}"


# ---------------------------------------------------------------- the image archive and its SBOM
@pytest.fixture(scope="module")
def loaded(dist):
    """The OCI archive loaded into a podman store of its own: nothing of the machine's store
    (the image `make image` left there, the test image) can stand in for what it holds. (Its run
    root is short: podman refuses one longer than 50 characters, as a test's tmp path is.)"""
    store = Path(tempfile.mkdtemp(prefix="txnwatch-store-"))
    options = ("--root", str(store / "root"), "--runroot", str(store / "run"))
    try:
        out = podman(*options, "load", "-i", str(dist / IMAGE_ARCHIVE), timeout=300)
        assert f"Loaded image: {IMAGE}" in out.stdout + out.stderr, out.stdout + out.stderr
        yield options
    finally:
        podman(*options, "system", "reset", "--force", check=False, timeout=300)
        shutil.rmtree(store, ignore_errors=True)


def test_the_loaded_image_serves_a_broker(loaded, broker):
    """A container of the loaded archive, hardened as production runs it; the OCI format drops the
    HEALTHCHECK, which `--health-cmd` gives back as docs/deployment.md says."""
    inspected = json.loads(podman(*loaded, "image", "inspect", IMAGE).stdout)[0]
    assert inspected["Config"]["Labels"]["org.opencontainers.image.version"] == __version__
    assert not inspected.get("Healthcheck")
    port, name = free_port(), f"txnwatch-release-{uuid.uuid4().hex[:8]}"
    env = {"TXNWATCH_BOOTSTRAP_SERVERS": broker.bootstrap, "TXNWATCH_CLUSTER_NAME": "release",
           "TXNWATCH_PORT": str(port)}
    podman(*loaded, *run_command(IMAGE, name, env=env, options=("--read-only", "--cap-drop=all",
                                                                "--health-cmd", "txnwatch healthcheck")))
    try:
        body = wait_for(lambda: (b := _metrics(port)) and _up("release").search(b) and b, 60,
                        what="the loaded image's exporter to poll the broker")
        assert re.search(rf'^txnwatch_build_info\{{[^}}]*version="{re.escape(__version__)}"', body, re.M)
        health = podman(*loaded, "healthcheck", "run", name, check=False)
        assert health.returncode == 0, health.stdout + health.stderr
    finally:
        podman(*loaded, "rm", "--force", "--time", "0", name, check=False)


def test_the_sbom_is_valid_and_lists_what_the_image_holds(dist, loaded):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    text = (dist / SBOM).read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    sbom = json.loads(text)
    assert sbom["metadata"]["component"]["name"] == "txnwatch"
    assert sbom["metadata"]["component"]["version"] == __version__
    listed = {(c["name"].lower(), c["version"]) for c in sbom["components"]}
    frozen = podman(*loaded, *run_command(IMAGE, f"txnwatch-freeze-{uuid.uuid4().hex[:8]}",
                                          ("-m", "pip", "freeze", "--all"), detach=False,
                                          options=("--entrypoint", "/opt/txnwatch/venv/bin/python"))).stdout
    held = {tuple(line.lower().split("==")) for line in frozen.split() if "==" in line}
    held = {(n, v) for n, v in held if n not in ("pip", "setuptools", "wheel")}
    assert listed == held | {("txnwatch", __version__)}, listed ^ held
    assert all(c.get("purl", "").startswith("pkg:pypi/") and c.get("licenses") for c in sbom["components"]), \
        [c["name"] for c in sbom["components"] if not c.get("licenses")]
