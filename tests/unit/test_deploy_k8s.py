from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_kubernetes_example_is_valid_and_hardened():
    docs = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/txnwatch.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ConfigMap", "Deployment", "Service", "ServiceMonitor"}
    from txnwatch.config import parse_config

    data = yaml.safe_load(kinds["ConfigMap"]["data"]["txnwatch.yaml"])
    for c in data["clusters"]:  # the password file exists only in the pod
        assert c["client"].pop("sasl.password").startswith("${file:/etc/txnwatch/secrets/")
    cfg = parse_config(data)
    assert cfg.clusters[0].transaction_log_tap
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] and c["securityContext"]["readOnlyRootFilesystem"]
    assert c["ports"][0]["containerPort"] == 10129
    assert kinds["Service"]["spec"]["publishNotReadyAddresses"] is True
    assert kinds["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "http-metrics"
    rule = yaml.safe_load((ROOT / "deploy/prometheus/prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
