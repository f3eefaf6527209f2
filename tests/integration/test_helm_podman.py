"""The rendered chart installed for real, as far as this machine allows: `podman kube play`
of the Deployment, the config ConfigMap and the Service that `helm template` renders for
`--set service.port=<a free port>`, the image built from this tree (`make image`'s build,
txnwatch_dev.container.session_image) and the session broker. The pod listens on that port
and serves /metrics, its Kafka cluster under config.cluster_label, at the chart's appVersion.

What this machine needs that a Kubernetes cluster would not (in this test, not the chart):
- host networking, podman's only network here. podman 4.3 publishes a containerPort on the
  host, which host networking refuses: the container's `ports` are left out (in Kubernetes a
  declaration; the exporter listens where its config file says).
- podman 4.3 gives a pod's infra container 1048576 open files, above this machine's hard
  limit (which root here cannot raise), and neither kube play nor containers.conf lowers it
  there: runc runs behind a wrapper that sets the limits txnwatch_dev.container.ULIMITS gives
  `podman run`.
- podman's pause binary, catatonit (Debian package catatonit).
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.integration.helm_helpers import CHART, one, render
from txnwatch_dev.container import RUNTIME, TEST_IMAGE, ULIMITS, session_image
from txnwatch_dev.net import free_port, wait_for

pytestmark = [pytest.mark.integration]

RLIMITS = {"nofile": "RLIMIT_NOFILE", "nproc": "RLIMIT_NPROC"}


def capped_runtime(directory: Path) -> Path:
    """`runc` with each container's rlimits set to ULIMITS before it is created."""
    limits = {RLIMITS[name]: [int(x) for x in value.split(":")]
              for name, value in (u.split("=") for u in ULIMITS)}
    script = directory / "runc-capped"
    script.write_text(f"""#!/bin/sh
prev=""
for a in "$@"; do
  if [ "$prev" = --bundle ] || [ "$prev" = -b ]; then bundle=$a; fi
  prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  python3 - "$bundle/config.json" <<'PY'
import json, sys
limits = {limits!r}
spec = json.load(open(sys.argv[1]))
kept = [r for r in spec["process"].get("rlimits", []) if r["type"] not in limits]
spec["process"]["rlimits"] = kept + [{{"type": t, "soft": s, "hard": h}} for t, (s, h) in limits.items()]
json.dump(spec, open(sys.argv[1], "w"))
PY
fi
exec {RUNTIME} "$@"
""")
    script.chmod(0o755)
    return script


def kube(runtime: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", "--runtime", str(runtime), "kube", *args], capture_output=True, text=True,
                          timeout=300)


def playable(docs: list[dict], release: str) -> list[dict]:
    deployment = one(docs, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0].pop("ports")
    return [one(docs, "ConfigMap", f"{release}-txnwatch"), deployment, one(docs, "Service")]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def test_the_rendered_chart_serves_metrics_on_service_port_under_podman_kube_play(broker, tmp_path):
    assert shutil.which("catatonit") or Path("/usr/libexec/podman/catatonit").exists(), \
        "podman kube play needs its pause binary: apt-get install catatonit"
    session_image()
    repository, tag = TEST_IMAGE.rsplit(":", 1)
    port = free_port()
    release = f"kp{port}"
    docs = render(None, f"service.port={port}", f"image.repository={repository}", f"image.tag={tag}",
                  "config.cluster_label=kcluster", "config.clusters[0].name=prod",
                  f"config.clusters[0].bootstrap_servers={broker.bootstrap}", release=release)
    manifests = tmp_path / "kube.yaml"
    manifests.write_text(yaml.safe_dump_all(playable(docs, release)))
    runtime = capped_runtime(tmp_path)
    played = kube(runtime, "play", "--network", "host", str(manifests))
    try:
        assert played.returncode == 0, played.stdout + played.stderr
        up = 'txnwatch_up{kcluster="prod",source="poller"} 1.0'
        try:
            wait_for(lambda: up in scrape(port), timeout=180, what=f"{up} on port {port}")
        except TimeoutError as exc:
            logs = subprocess.run(["podman", "logs", f"{release}-txnwatch-pod-0-txnwatch"], capture_output=True,
                                  text=True).stderr
            raise AssertionError(f"{exc}; the exporter says:\n{logs[-3000:]}") from None
        app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
        assert f'txnwatch_build_info{{version="{app_version}"' in scrape(port)
    finally:
        down = kube(runtime, "down", str(manifests))
        assert down.returncode == 0, down.stderr
