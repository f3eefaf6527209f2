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


def test_sharded_statefulset_runs_one_shard_per_pod():
    docs = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/txnwatch-sharded.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"StatefulSet", "Service", "ServiceMonitor"}
    sts = kinds["StatefulSet"]["spec"]
    c = sts["template"]["spec"]["containers"][0]
    args = c["args"]
    total = int(args[args.index("--total-shards") + 1])
    assert args[args.index("--shard") + 1] == "auto" and total == sts["replicas"] == 3
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    from txnwatch.sharding import Shard, from_flags

    name = kinds["StatefulSet"]["metadata"]["name"]
    assert [from_flags("auto", total, env={"POD_NAME": f"{name}-{i}"}) for i in range(3)] == \
        [Shard(i, 3) for i in range(3)]
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]    # worker files on a read-only root
    assert c["securityContext"]["readOnlyRootFilesystem"]
    assert kinds["Service"]["spec"]["clusterIP"] == "None"
