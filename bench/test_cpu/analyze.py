"""The sampler's CPU per process kind and per test (bench/test_cpu/README.md):
`analyze.py SAMPLES TESTS`."""

import collections
import os
import sys

HZ = os.sysconf("SC_CLK_TCK")


def kind(cmd: str) -> str:
    exe = cmd.split(" ")[0]
    if "spark-class" in cmd:        # seen as bash before it execs the driver's JVM
        return "java: Spark"
    if "java" in exe:
        if "kafka.Kafka" in cmd or " -Xms64m " in cmd:      # txnwatch_dev/kafka/node.py's heap flags
            return "java: Kafka node"
        if "pyspark" in cmd:
            return "java: Spark"
        if "flink" in cmd.lower():
            return "java: Flink"
        return "java: other"
    if "python" in exe:
        if "txnwatch.cli" in cmd or "/bin/txnwatch" in cmd:
            return "python: txnwatch " + ("worker" if "worker" in cmd else "exporter")
        return "python: " + " ".join(cmd.split(" ")[1:3])[:50]
    return exe[-30:] or "(kernel)"


def main(samples: str, tests: str) -> None:
    info: dict[str, tuple[str, str]] = {}
    last: dict[str, int] = {}
    deltas: list[tuple[float, str, int]] = []
    for line in open(samples):
        parts = line.rstrip("\n").split(" ", 3)
        if parts[0] == "N" and len(parts) >= 3:
            info.setdefault(parts[1], (parts[2], parts[3] if len(parts) > 3 else ""))
        elif parts[0] == "S" and len(parts) == 4:
            t, pid, cpu = float(parts[1]), parts[2], int(parts[3])
            d = cpu - last.get(pid, 0)
            if d > 0:
                deltas.append((t, pid, d))
            last[pid] = cpu
    runs: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    started: dict[tuple[str, str], float] = {}
    for line in open(tests):
        t, worker, what, node = line.rstrip("\n").split(" ", 3)
        if what == "start":
            started[(worker, node)] = float(t)
        elif (worker, node) in started:
            runs[worker].append((started.pop((worker, node)), float(t), node))

    def worker_of(pid: str) -> str | None:
        for _ in range(30):
            if pid in runs:
                return pid
            if pid not in info:
                return None
            pid = info[pid][0]
        return None

    per_kind: collections.Counter = collections.Counter()
    per_test: collections.Counter = collections.Counter()
    per_test_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for t, pid, d in deltas:
        k = kind(info.get(pid, ("", ""))[1])
        per_kind[k] += d
        w = worker_of(pid)
        test = next((n for s, e, n in runs.get(w, ()) if s - 1 <= t <= e + 1), None) if w else None
        if test:
            per_test[test] += d
            per_test_kind[test][k] += d
    print(f"CPU seen: {sum(per_kind.values()) / HZ:.0f} s")
    for k, v in per_kind.most_common(20):
        print(f"  {v / HZ:8.1f} s  {k}")
    print("per test:")
    for test, v in per_test.most_common(40):
        top = ", ".join(f"{k} {x / HZ:.0f}" for k, x in per_test_kind[test].most_common(3))
        print(f"  {v / HZ:7.1f} s  {test.split('::')[-1][:70]}  [{top}]")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
