"""The Helm chart (charts/txnwatch): `helm lint --strict` and `helm template` (Helm built
from the Go module proxy) for the default values and the three of ci/ (sharded; SASL_SSL
with secrets; web TLS with client certificates and basic auth). Every rendered manifest is
validated against the Kubernetes API schemas (kubernetes-validate, strict) or, for the
Prometheus Operator's kinds, against its CRDs' schemas (unknown fields refused); the
rendered rules pass `promtool check rules`, and the rendered exporter and web configuration
pass the exporter's own `serve --check-config`. One port, service.port, reaches the config
file, the pod, the probes, the Service and the monitor; `config` is checked against the
exporter's JSON Schema, and a config.http value that contradicts the chart's is refused,
naming both. (test_helm_mixin.py: the alerts and dashboards follow the values;
test_helm_package.py: the packaged chart.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.helm_helpers import (
    CHART,
    KUBERNETES,
    ROOT,
    VALUES,
    exporter_config,
    helm,
    one,
    refusal,
    render,
    workload,
)
from txnwatch_dev.gotools import prometheus_operator_crds
from txnwatch_dev.observability.prometheus import promtool_binary
from txnwatch_dev.pki import make_ca

pytestmark = [pytest.mark.integration]


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
    validate_all(docs)
    kinds = {d["kind"] for d in docs}
    pod = workload(docs)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"ConfigMap", "Service", "ServiceAccount", "PrometheusRule"} <= kinds
    dashboards = [d for d in docs if d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"]]
    assert len(dashboards) == 5 and all(d["metadata"]["labels"]["grafana_dashboard"] == "1" for d in dashboards)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "txnwatch")
    if name == "sharded":
        assert workload(docs)["kind"] == "StatefulSet" and workload(docs)["spec"]["replicas"] == 8
        assert container["args"] == ["serve", "--shard", "auto", "--total-shards", "8"]
        assert {"PodMonitor", "PodDisruptionBudget", "NetworkPolicy"} <= kinds
        assert sum(d["kind"] == "Service" for d in docs) == 2                    # + the headless one
    else:
        assert workload(docs)["kind"] == "Deployment" and workload(docs)["spec"]["replicas"] == 1
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


def validate_all(docs: list[dict]) -> None:
    crds = _crd_schemas()
    for doc in docs:
        validate(doc, crds)


def monitor_job(docs: list[dict]) -> str:
    """The job label Prometheus gives the series: the value of the monitor's jobLabel on the
    Service (ServiceMonitor) or the pod (PodMonitor)."""
    monitor = next(d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor"))
    labels = next(d for d in docs if d["kind"] == "Service")["metadata"]["labels"] if monitor["kind"] == \
        "ServiceMonitor" else next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))[
        "spec"]["template"]["metadata"]["labels"]
    return labels[monitor["spec"]["jobLabel"]]


@pytest.mark.parametrize("name", sorted(VALUES))
def test_the_rendered_rules_pass_promtool(name, tmp_path):
    promtool = promtool_binary()
    rule = one(render(VALUES[name]), "PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    if name == "default":
        committed = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yml").read_text())
        assert rule["spec"]["groups"] == committed["groups"]            # the rules `txnwatch alerts` writes


def check_config(docs: list[dict], tmp_path: Path) -> str:
    """The ConfigMap's file and the web Secret's file, their in-pod paths mapped to files
    made here, through `txnwatch serve --check-config` with the pod's arguments: its output."""
    container = workload(docs)["spec"]["template"]["spec"]["containers"][0]
    text = one(docs, "ConfigMap", "txnwatch")["data"]["txnwatch.yaml"]
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
    # the pod's variables (the image sets none that configure: tests/integration/test_image.py)
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": f"{workload(docs)['metadata']['name']}-1"}
    env.update({e["name"]: e["value"] for e in container["env"] if "value" in e and e["name"] != "TXNWATCH_CONFIG"})
    env.update({e["name"]: "from-a-secret" for e in container["env"] if "valueFrom" in e and "secretKeyRef" in
                e["valueFrom"]})
    args = [a for a in container["args"] if a != "serve"]
    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "serve", "--check-config", "--config",
                          str(tmp_path / "txnwatch.yaml"), *args], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "configuration valid" in out.stdout
    return out.stdout


@pytest.mark.parametrize("name", sorted(VALUES))
def test_the_rendered_exporter_config_passes_the_exporters_check(name, tmp_path):
    out = check_config(render(VALUES[name]), tmp_path)
    if name == "web-tls":
        assert re.search(r"https://\S+:10129 \(.*TLS TLS13\+, client certificates: RequireAndVerifyClientCert; "
                         r"1 basic-auth user\(s\)", out), out
    if name == "sharded":
        assert "shard 1 of 0..7" in out, out


def endpoint(docs: list[dict]) -> dict:
    monitor = one(docs, ("ServiceMonitor", "PodMonitor"))
    endpoints = monitor["spec"]["endpoints" if monitor["kind"] == "ServiceMonitor" else "podMetricsEndpoints"]
    assert len(endpoints) == 1
    return endpoints[0]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_service_port_is_the_port_of_the_exporter_pod_probes_service_and_monitor(kind, tmp_path):
    """The exporter listens where the pod, the probes, the Service and the monitor say: on
    service.port (by the port's name, http-metrics), and on every interface (no host: the
    exporter's default)."""
    docs = render(None, "service.port=9000", f"monitor.kind={kind}", "networkPolicy.enabled=true")
    validate_all(docs)
    container = workload(docs)["spec"]["template"]["spec"]["containers"][0]
    assert exporter_config(docs)["http"] == {"port": 9000}
    assert container["ports"] == [{"name": "http-metrics", "containerPort": 9000, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"]["port"] == container["readinessProbe"]["httpGet"]["port"] == \
        "http-metrics"
    assert one(docs, "Service")["spec"]["ports"] == [
        {"name": "http-metrics", "port": 9000, "targetPort": "http-metrics", "protocol": "TCP"}]
    assert endpoint(docs)["port"] == "http-metrics" and endpoint(docs)["path"] == "/metrics"
    assert one(docs, "NetworkPolicy")["spec"]["ingress"][0]["ports"] == [{"port": "http-metrics", "protocol": "TCP"}]
    assert re.search(r"http: http://\S+:9000 ", check_config(docs, tmp_path))


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_the_http_settings_the_chart_leaves_to_config(kind, tmp_path):
    """config.http's other keys reach the file; the monitor scrapes telemetry_path; a port equal
    to service.port contradicts nothing."""
    docs = render(None, f"monitor.kind={kind}", "config.http.telemetry_path=/txnwatch/metrics",
                  "config.http.threads=4", "config.http.ingest_max_bytes=2000000", "config.http.port=10129")
    validate_all(docs)
    assert exporter_config(docs)["http"] == {"port": 10129, "telemetry_path": "/txnwatch/metrics", "threads": 4,
                                             "ingest_max_bytes": 2000000}
    assert endpoint(docs)["path"] == "/txnwatch/metrics"
    container = workload(docs)["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"       # the probes do not move
    assert "metrics at /txnwatch/metrics" in check_config(docs, tmp_path)


def test_listen_addresses_on_service_port(tmp_path):
    docs = render(None, "service.port=9000", "config.http.listen_addresses={:9000}")
    assert exporter_config(docs)["http"] == {"listen_addresses": [":9000"]}     # the port is theirs
    assert re.search(r"http: http://\S+:9000 ", check_config(docs, tmp_path))


def test_a_bearer_token_for_metrics_gives_the_monitor_its_authorization():
    docs = render(None, "config.http.auth.bearer_token=${env:METRICS_TOKEN}",
                  "secretEnv.METRICS_TOKEN.name=txnwatch-metrics", "secretEnv.METRICS_TOKEN.key=token",
                  "monitor.authorization.type=Bearer", "monitor.authorization.credentials.name=txnwatch-metrics",
                  "monitor.authorization.credentials.key=token")
    validate_all(docs)
    assert endpoint(docs)["authorization"] == {"type": "Bearer", "credentials": {"name": "txnwatch-metrics",
                                                                                 "key": "token"}}


@pytest.mark.parametrize("config, says", [
    ({"clusters": [{"name": "prod", "bootstrap_server": "kafka:9092"}]},
     ["at '/config/clusters/0'", "'bootstrap_server' not allowed"]),
    ({"clusters": [{"name": "prod", "bootstrap_servers": "kafka:9092"}], "log_levl": "INFO"},
     ["at '/config'", "'log_levl' not allowed"]),
    ({"clusters": [{"name": "prod", "bootstrap_servers": "kafka:9092"}], "http": {"thread": 4}},
     ["at '/config/http'", "'thread' not allowed"]),
    ({"clusters": [{"name": "prod", "bootstrap_servers": "kafka:9092", "canary": {"interval_seconds": "10s"}}]},
     ["at '/config/clusters/0/canary/interval_seconds'", "got string"]),
])
def test_a_mistake_in_config_fails_lint_and_template_naming_the_key(config, says, tmp_path):
    """values.schema.json's `config` is the exporter's JSON Schema: what would crash-loop
    the pod fails the install instead."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": config}))
    lint = helm("lint", "--strict", str(CHART), "-f", str(values), check=False)
    assert lint.returncode != 0 and all(s in lint.stdout + lint.stderr for s in says), lint.stdout + lint.stderr
    refused = refusal(values=values)
    assert all(s in refused for s in says), refused


@pytest.mark.parametrize("sets, says", [
    (["config.http.port=9100", "service.port=9000"], "config.http.port 9100 contradicts service.port 9000"),
    (["config.http.listen_addresses={[::]:9000,:9100}", "service.port=9000"],
     "config.http.listen_addresses[1] :9100 contradicts service.port 9000"),
    (["config.http.web_config_file=/etc/web.yml", "web.tls.enabled=true", "web.tls.secretName=t"],
     "config.http.web_config_file /etc/web.yml contradicts web.tls.enabled"),
    (["config.http.web_config_file=/etc/web.yml", "web.existingSecret=mine"],
     "config.http.web_config_file /etc/web.yml contradicts web.existingSecret"),
    (["config.http.web_config_file=/etc/web.yml"], "config.http.web_config_file /etc/web.yml: the chart mounts"),
    (["config.http.ingest_token=${env:TOKEN}", "ingestToken.secretName=ingest"],
     "config.http.ingest_token contradicts ingestToken.secretName ingest"),
    (["config.http.host=127.0.0.1"], "config.http.host 127.0.0.1 is loopback"),
    (["config.http.auth.bearer_token=${env:T}"], "config.http.auth.bearer_token: set monitor.authorization"),
])
def test_a_config_http_value_that_contradicts_the_chart_is_refused_naming_both(sets, says):
    refused = refusal(*sets)
    assert says in refused, refused


@pytest.mark.parametrize("sets, says", [
    (["config.clusters[0].name=prod", "config.clusters[0].bootstrap_servers=kafka:9092",
      "config.clusters[0].client.sasl\\.password=hunter2"],
     "config.clusters[0].client.sasl.password: a secret in the ConfigMap; write ${env:NAME}"),
    (["config.http.ingest_token=hunter2"], "config.http.ingest_token: a secret in the ConfigMap"),
    (["config.http.auth.bearer_token=hunter2"], "config.http.auth.bearer_token: a secret in the ConfigMap"),
    (["web.basicAuthUsers.prometheus=$2y$10$" + "a" * 53], "web.basicAuthUsers: set monitor.basicAuth"),
    (["web.tls.enabled=true"], "web.tls.enabled: set web.tls.secretName"),
    (["web.tls.enabled=true", "web.tls.secretName=t", "web.tls.clientAuthType=RequireAndVerifyClientCert"],
     "set web.tls.clientCA.secretName"),
    (["monitor.kind=Probe"], "/monitor/kind"),
    (["shards=3"], "additional properties"),
    (["prometheusRule.routingLabels={namespace,le}"], "prometheusRule.routingLabels: le is the histogram"),
    (["prometheusRule.routingLabels={namespace,namespace}"], "/prometheusRule/routingLabels"),
    (["prometheusRule.routingLabels={team-a}"], "/prometheusRule/routingLabels/0"),
    (["prometheusRule.runbookBaseUrl=wiki/runbooks"], "/prometheusRule/runbookBaseUrl"),
])
def test_what_the_chart_refuses_says_why(sets, says):
    refused = refusal(*sets)
    assert says.lower() in refused.lower(), refused
    assert "hunter2" not in refused


def test_where_a_secret_is_kept_is_no_secret():
    """An OIDC login's endpoint and CA file are plain values in the ConfigMap; its client secret
    is a reference to the Secret."""
    prefix = "config.clusters[0].client."
    docs = render(None, "config.clusters[0].name=prod", "config.clusters[0].bootstrap_servers=kafka:9093",
                  prefix + "security\\.protocol=SASL_SSL", prefix + "sasl\\.mechanism=OAUTHBEARER",
                  prefix + "sasl\\.oauthbearer\\.method=oidc",
                  prefix + "sasl\\.oauthbearer\\.token\\.endpoint\\.url=https://idp.example.com/token",
                  prefix + "sasl\\.oauthbearer\\.client\\.id=txnwatch",
                  prefix + "sasl\\.oauthbearer\\.client\\.secret=${env:OIDC_SECRET}",
                  prefix + "https\\.ca\\.location=/etc/txnwatch/secrets/idp-ca/ca.crt")
    client = exporter_config(docs)["clusters"][0]["client"]
    assert client["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example.com/token"
    assert client["sasl.oauthbearer.client.secret"] == "${env:OIDC_SECRET}"
    refused = refusal("config.clusters[0].name=prod", "config.clusters[0].bootstrap_servers=kafka:9093",
                      prefix + "sasl\\.oauthbearer\\.client\\.secret=hunter2")
    assert "client.sasl.oauthbearer.client.secret: a secret in the ConfigMap" in refused
