"""The Dockerfile: hadolint-clean, and its own commands install and start the exporter in a
fresh venv (no Docker engine here, so its RUN/ENV/ENTRYPOINT/HEALTHCHECK are replayed)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from txnwatch_dev.net import free_port, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def instructions(text: str) -> list[tuple[str, str]]:
    out, buf = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        instr, _, rest = buf.strip().partition(" ")
        out.append((instr.upper(), rest.strip()))
        buf = ""
    return out


def test_hadolint_clean():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    out = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile_commands_install_and_start_the_exporter(tmp_path, broker):
    steps = instructions((ROOT / "Dockerfile").read_text())
    kinds = [k for k, _ in steps]
    assert kinds[0] == "FROM" and "slim" in steps[0][1]
    assert ("USER", "10001") in steps and "HEALTHCHECK" in kinds and "EXPOSE" in kinds
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    workdir = tmp_path / "image"
    env: dict[str, str] = {}
    args: dict[str, str] = {}          # ARG defaults: no --build-arg in this replay
    entrypoint: list[str] = []
    cmd: list[str] = []
    healthcheck: list[str] = []
    skipped = []
    for kind, arg in steps:
        if kind == "WORKDIR":
            workdir = tmp_path / "image" / arg.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif kind == "COPY":
            *srcs, dst = shlex.split(arg)
            target = workdir / dst
            for src in srcs:
                s = ROOT / src
                if s.is_dir():
                    shutil.copytree(s, target, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    (target if dst.endswith("/") else target.parent).mkdir(parents=True, exist_ok=True)
                    shutil.copy(s, target / s.name if dst.endswith("/") else target)
        elif kind == "ARG":
            k, _, v = arg.partition("=")
            args[k] = shlex.split(v)[0] if v.strip() else ""
        elif kind == "ENV":
            for pair in shlex.split(arg):
                k, _, v = pair.partition("=")
                env[k] = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], v)
        elif kind == "RUN":
            for part in arg.split("&&"):
                words = shlex.split(part)
                if words[:2] == ["pip", "install"]:
                    subprocess.run([str(bin_dir / "pip"), *words[1:]], cwd=workdir, check=True,
                                   capture_output=True, env={**os.environ, **env})
                else:
                    skipped.append(words[0])
        elif kind == "ENTRYPOINT":
            entrypoint = json.loads(arg)
        elif kind == "CMD":
            cmd = json.loads(arg)
        elif kind == "HEALTHCHECK":
            healthcheck = json.loads(arg[arg.index("CMD") + 3:].strip())
    assert skipped == ["useradd"], skipped  # the only command not replayed is the user creation
    assert entrypoint == ["txnwatch"] and cmd == ["serve"]
    port = free_port()
    run_env = {**{k: v for k, v in os.environ.items() if not k.startswith("TXNWATCH_")}, **env,
               "PATH": f"{bin_dir}:/usr/bin:/bin", "TXNWATCH_PORT": str(port), "TXNWATCH_HOST": "127.0.0.1",
               "TXNWATCH_BOOTSTRAP_SERVERS": broker.bootstrap, "TXNWATCH_CLUSTER_NAME": "docker"}
    proc = subprocess.Popen([str(bin_dir / entrypoint[0]), *entrypoint[1:], *cmd], env=run_env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # the probe runs in the container's environment: it follows TXNWATCH_PORT
        probe = [str(bin_dir / healthcheck[0]), *healthcheck[1:]]
        wait_for(lambda: subprocess.run(probe, capture_output=True, env=run_env, cwd=tmp_path).returncode == 0, 60,
                 what="the image's HEALTHCHECK to pass")
        import urllib.request
        body = wait_for(lambda: (b := urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode())
                        and 'txnwatch_up{kafka_cluster="docker",source="poller"} 1.0' in b and b, 60,
                        what="the exporter in the fresh venv to poll the broker")
        assert "kafka_cluster_brokers" in body
        # the revision of an image built without --build-arg REVISION, and the license in it
        assert re.search(r'txnwatch_build_info\{[^}]*revision="unknown"', body), body[-2000:]
        assert (workdir / "LICENSE").read_text().lstrip().startswith("Apache License")
        # Only the pinned packages (and the project) are in the venv.
        frozen = subprocess.run([str(bin_dir / "pip"), "freeze"], capture_output=True, text=True).stdout
        pinned = {line.split("==")[0].lower() for line in (ROOT / "requirements/exporter.txt").read_text().splitlines()
                  if "==" in line}
        installed = {line.split("==")[0].split(" @ ")[0].lower() for line in frozen.splitlines() if line}
        assert installed - pinned <= {"txnwatch"}, installed - pinned
        # ... and the image holds no test or demo harness
        spec = subprocess.run([str(bin_dir / "python"), "-c", "import importlib.util as u; "
                               "print(u.find_spec('txnwatch_dev'), u.find_spec('txnwatch.devtools'))"],
                              cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
        assert spec == ["None", "None"], spec
    finally:
        proc.terminate()
        proc.wait(15)
