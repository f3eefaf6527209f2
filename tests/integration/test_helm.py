"""The Helm chart (charts/txnwatch): `helm lint --strict` and `helm template` (Helm built
from the Go module proxy) for the default values and the three of ci/ (sharded; SASL_SSL
with secrets; web TLS with client certificates and basic auth). Every rendered manifest is
validated against the Kubernetes API schemas (kubernetes-validate, strict) or, for the
Prometheus Operator's kinds, against its CRDs' schemas (unknown fields refused); the
rendered rules pass `promtool check rules`, and the rendered exporter and web configuration
pass the exporter's own `serve --check-config`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from txnwatch_dev.gotools import prometheus_operator_crds, tool
from txnwatch_dev.observability.prometheus import promtool_binary
from txnwatch_dev.pki import make_ca

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "txnwatch"
VALUES = {"default": None, **{p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*.yaml"))}}
KUBERNETES = "1.37.0"      # the newest release kubernetes-validate knows


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(tool("helm")), *args], capture_output=True, text=True, timeout=120,
                         env={"HOME": "/tmp", "PATH": "/usr/bin:/bin", "HELM_CACHE_HOME": "/tmp/helm-cache",
                              "HELM_CONFIG_HOME": "/tmp/helm-config", "HELM_DATA_HOME": "/tmp/helm-data"})
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {out.stderr}{out.stdout}")
    return out


def render(values: Path | None, *sets: str) -> list[dict]:
    args = ["template", "txnwatch", str(CHART), "--namespace", "monitoring", "--kube-version", KUBERNETES]
    if values:
        args += ["-f", str(values)]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def test_the_set_of_values_files():
    assert set(VALUES) == {"default", "sharded", "sasl-ssl", "web-tls"}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_helm_lint_strict(name):
    args = ["lint", "--strict", str(CHART)] + (["-f", str(VALUES[name])] if VALUES[name] else [])
    out = helm(*args)
    assert "0 chart(s) failed" in out.stdout, out.stdout


def _crd_schemas() -> dict[str, dict]:
    out = {}
    for text in prometheus_operator_crds().values():
        crd = yaml.safe_load(text)
        for v in crd["spec"]["versions"]:
            out[(f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"])] = v["schema"]["openAPIV3Schema"]
    return out


def _unknown_fields(value, schema: dict, path: str = "") -> list[str]:
    """Fields a structural schema does not declare (the API server would prune them)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict) and "properties" in schema:
        out = []
        for k, v in value.items():
            if k not in schema["properties"]:
                out.append(f"{path}.{k}")
            else:
                out += _unknown_fields(v, schema["properties"][k], f"{path}.{k}")
        return out
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return [f for k, v in value.items() for f in _unknown_fields(v, schema["additionalProperties"], f"{path}.{k}")]
    if isinstance(value, list) and "items" in schema:
        return [f for i, v in enumerate(value) for f in _unknown_fields(v, schema["items"], f"{path}[{i}]")]
    return []


def validate(doc: dict, crds: dict) -> None:
    import jsonschema
    import kubernetes_validate

    key = (doc["apiVersion"], doc["kind"])
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        schema = crds[key]
        # not jsonschema.validate: it checks the schema first, and the CRDs hold Go regexes
        # (`^(?i)...`) Python's re does not take; none of those fields is used here
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
        assert not errors, f"{doc['kind']} {doc['metadata']['name']}: {errors}"
        unknown = _unknown_fields(doc, schema)
        assert not unknown, f"{doc['kind']} {doc['metadata']['name']}: fields its CRD does not have: {unknown}"
    else:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_rendered_manifest_is_valid_and_hardened(name):
    docs = render(VALUES[name])
    crds = _crd_schemas()
    for doc in docs:
        validate(doc, crds)
    kinds = {d["kind"] for d in docs}
    workload = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))
    pod = workload["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"ConfigMap", "Service", "ServiceAccount", "PrometheusRule"} <= kinds
    dashboards = [d for d in docs if d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"]]
    assert len(dashboards) == 5 and all(d["metadata"]["labels"]["grafana_dashboard"] == "1" for d in dashboards)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "txnwatch")
    if name == "sharded":
        assert workload["kind"] == "StatefulSet" and workload["spec"]["replicas"] == 3
        assert container["args"] == ["serve", "--shard", "auto", "--total-shards", "3"]
        assert {"PodMonitor", "PodDisruptionBudget", "NetworkPolicy"} <= kinds
        assert sum(d["kind"] == "Service" for d in docs) == 2                    # + the headless one
    else:
        assert workload["kind"] == "Deployment" and workload["spec"]["replicas"] == 1
        assert "ServiceMonitor" in kinds
    if name == "sasl-ssl":
        env = {e["name"]: e for e in container["env"]}
        assert env["KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "txnwatch-kafka", "key": "password"}
        assert env["TXNWATCH_INGEST_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "txnwatch-ingest"
        assert "${env:KAFKA_PASSWORD}" in config["data"]["txnwatch.yaml"]
    if name == "web-tls":
        monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
        endpoint = monitor["spec"]["endpoints"][0]
        assert endpoint["scheme"] == "https" and endpoint["tlsConfig"]["keySecret"]["name"] == "prometheus-client"
        assert endpoint["basicAuth"]["password"] == {"name": "txnwatch-scrape", "key": "password"}
        # a kubelet shows no client certificate: the probes run the exporter's own healthcheck
        assert container["livenessProbe"]["exec"]["command"] == ["txnwatch", "healthcheck"]
        assert "ConfigMap" in kinds and any(d["metadata"]["name"].endswith("alertmanager-example") for d in docs)
    else:
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics", "scheme": "HTTP"}
    assert monitor_job(docs) == "txnwatch"


def monitor_job(docs: list[dict]) -> str:
    """The job label Prometheus gives the series: the value of the monitor's jobLabel on the
    Service (ServiceMonitor) or the pod (PodMonitor)."""
    monitor = next(d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor"))
    labels = next(d for d in docs if d["kind"] == "Service")["metadata"]["labels"] if monitor["kind"] == \
        "ServiceMonitor" else next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))[
        "spec"]["template"]["metadata"]["labels"]
    return labels[monitor["spec"]["jobLabel"]]


def test_the_rendered_rules_pass_promtool(tmp_path):

    promtool = promtool_binary()
    rule = next(d for d in render(None) if d["kind"] == "PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    committed = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yml").read_text())
    assert rule["spec"]["groups"] == committed["groups"]            # the rules `txnwatch alerts` writes


@pytest.mark.parametrize("name", sorted(VALUES))
def test_the_rendered_exporter_config_passes_the_exporters_check(name, tmp_path):
    """The ConfigMap's file and the web Secret's file, their in-pod paths mapped to files
    made here, through `txnwatch serve --check-config` with the pod's arguments."""
    docs = render(VALUES[name])
    workload = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))
    container = workload["spec"]["template"]["spec"]["containers"][0]
    text = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "txnwatch")["data"][
        "txnwatch.yaml"]
    web = next((d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "txnwatch-web"), None)
    paths = {}
    if web is not None:
        ca = make_ca(tmp_path / "pki")
        server = ca.issue("tls", "localhost", server=True)
        paths = {"/etc/txnwatch/web-tls/tls.crt": server.cert, "/etc/txnwatch/web-tls/tls.key": server.key,
                 "/etc/txnwatch/web-client-ca/ca.crt": ca.cert}
        web_text = web["stringData"]["web-config.yml"]
        for pod_path, here in paths.items():
            web_text = web_text.replace(pod_path, str(here))
        (tmp_path / "web-config.yml").write_text(web_text)
        paths["/etc/txnwatch/web-config/web-config.yml"] = tmp_path / "web-config.yml"
    for pod_path, here in paths.items():
        text = text.replace(pod_path, str(here))
    (tmp_path / "txnwatch.yaml").write_text(text)
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": f"{workload['metadata']['name']}-1"}
    env.update({e["name"]: "from-a-secret" for e in container["env"] if "valueFrom" in e and "secretKeyRef" in
                e["valueFrom"]})
    args = [a for a in container["args"] if a != "serve"]
    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "serve", "--check-config", "--config",
                          str(tmp_path / "txnwatch.yaml"), *args], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "configuration valid" in out.stdout
    if name == "web-tls":
        assert "https://0.0.0.0:10129 (TLS TLS13+, client certificates: RequireAndVerifyClientCert; " \
               "1 basic-auth user(s))" in out.stdout, out.stdout
    if name == "sharded":
        assert "shard 1 of 0..2" in out.stdout, out.stdout


@pytest.mark.parametrize("sets, says", [
    (["config.clusters[0].name=prod", "config.clusters[0].bootstrap_servers=kafka:9092",
      "config.clusters[0].client.sasl\\.password=hunter2"],
     "config.clusters[0].client.sasl.password: a secret in the ConfigMap; write ${env:NAME}"),
    (["web.basicAuthUsers.prometheus=$2y$10$" + "a" * 53], "web.basicAuthUsers: set monitor.basicAuth"),
    (["web.tls.enabled=true"], "web.tls.enabled: set web.tls.secretName"),
    (["web.tls.enabled=true", "web.tls.secretName=t", "web.tls.clientAuthType=RequireAndVerifyClientCert"],
     "set web.tls.clientCA.secretName"),
    (["monitor.kind=Probe"], "/monitor/kind"),
    (["shards=3"], "additional properties"),
    (["config.http.port=1"], "config.http"),
])
def test_what_the_chart_refuses_says_why(sets, says):
    args = ["template", "txnwatch", str(CHART), "--kube-version", KUBERNETES]
    for s in sets:
        args += ["--set", s]
    out = helm(*args, check=False)
    assert out.returncode != 0 and says.lower() in out.stderr.lower(), out.stderr
    assert "hunter2" not in out.stderr
