"""What the test suite's light JVM profile saves (txnwatch_dev/jvm.py, txnwatch_dev/kafka/cds.py).

    .venv/bin/python bench/bench_jvm_profile.py [--inits 5000] [--idle 30]

For each profile, in a process of its own (the profile is read from the environment, as the
test suite sets it): a Kafka node of the default release is started and measured (seconds
to ready and the JVM's CPU by then), sent --inits InitProducerIds (the JVM's CPU for them),
then left idle --idle seconds (its CPU); then a local Spark driver runs a small aggregation
three times (the driver JVM's CPU from launch to the end). Profiles: `server` (the default:
C1 then C2, G1), `light` without the class archive, `light` (C1 only, the serial collector,
the release's class-data sharing archive, made first if missing). Run by hand on a quiet
machine; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
VARIANTS = {"server": ("server", True), "light, no archive": ("light", False), "light": ("light", True)}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def java_children() -> list[int]:
    me = str(os.getpid())
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if d.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1] == me and \
                        b"java" in d.joinpath("cmdline").read_bytes().split(b"\0")[0]:
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def one(share_classes: bool, inits: int, idle: float) -> dict:
    from txnwatch.pipeline import spark_session
    from txnwatch_dev.jvm import spark_submit_args
    from txnwatch_dev.kafka import KafkaBroker
    from txnwatch_dev.transactions.rawkafka import init_producer_id_until

    row = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.monotonic()
        broker = KafkaBroker(workdir=Path(tmp), share_classes=share_classes).start()
        try:
            row["ready_s"] = time.monotonic() - t
            row["start_cpu_s"] = c0 = cpu_seconds(broker.pid)
            init_producer_id_until(broker.bootstrap, "bench-jvm", inits)
            row["inits_cpu_s"] = (c1 := cpu_seconds(broker.pid)) - c0
            time.sleep(idle)
            row["idle_cpu_s"] = cpu_seconds(broker.pid) - c1
        finally:
            broker.cleanup()
    os.environ["PYSPARK_SUBMIT_ARGS"] = spark_submit_args(os.environ.get("PYSPARK_SUBMIT_ARGS"))
    spark = spark_session("local[2]", "bench-jvm", 2, kafka_connector=False)
    [driver] = java_children()
    for _ in range(3):
        spark.range(2_000_000).selectExpr("id % 97 AS k").groupBy("k").count().collect()
    row["spark_cpu_s"] = cpu_seconds(driver)
    spark.stop()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inits", type=int, default=5000)
    ap.add_argument("--idle", type=float, default=30.0)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(VARIANTS[args.one][1], args.inits, args.idle)))
        return
    print(f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}")
    print("| profile | node ready | node CPU to ready | CPU for "
          f"{args.inits} InitProducerIds | CPU idle {args.idle:g} s | Spark driver CPU |")
    print("|---|---|---|---|---|---|")
    for name, (profile, _) in VARIANTS.items():
        env = {**os.environ, "TXNWATCH_JVM_PROFILE": profile}
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        out = subprocess.run([sys.executable, __file__, "--one", name, "--inits", str(args.inits),
                              "--idle", str(args.idle)], env=env, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {name} | {r['ready_s']:.1f} s | {r['start_cpu_s']:.1f} s | {r['inits_cpu_s']:.1f} s "
              f"| {r['idle_cpu_s']:.2f} s | {r['spark_cpu_s']:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
