"""The house's rules, read from the imports (ast, nothing imported): no import circle in
txnwatch/; its rooms stacked (TIERS: nothing imports a room above its own); the exporter's
layers (txnwatch/exporter/__init__.py draws them) and the Kafka room (txnwatch/kafka/) below
them, the only place a Kafka client is made; the shared leaves importing only what they may,
the producer wrapper never importing the generators; the shipped package never importing the
test and demo harness (txnwatch_dev) or the tests; and the unit tests using only the
harness's pure modules (none that starts a process, or imports one that does)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

EXPORTER = "txnwatch.exporter"
KAFKA = "txnwatch.kafka"          # every Kafka client call, and every client made
# The package's rooms, bottom to top: a module may import its own room and those below it,
# never one above. At the bottom the vocabularies every room shares; then the configuration,
# the Kafka room and the generated rules and dashboards (which read only those); the clients
# of Kafka (the producer wrapper, the canary); the Spark side; the exporter, which serves
# them all; the commands over it.
TIERS = (
    ("txnwatch", "txnwatch.fencing", "txnwatch.trigger_modes", "txnwatch.apps", "txnwatch.metrics",
     "txnwatch.sharding", "txnwatch.maven", "txnwatch.logsetup"),
    ("txnwatch.config", KAFKA, "txnwatch.producer_state", "txnwatch.alerts", "txnwatch.dashboards"),
    ("txnwatch.producer", "txnwatch.canary", "txnwatch.spark_connector"),
    ("txnwatch.spark_listener",),
    (EXPORTER,),
    ("txnwatch.check", "txnwatch.pipeline", "txnwatch.remediation"),
    ("txnwatch.cli",),
)
TIER = {r: n for n, tier in enumerate(TIERS) for r in tier}
# exporter layer -> layers of the exporter (or the Kafka room) it must never import
FORBIDDEN = {
    "serve": {KAFKA, "poll", "tap", "runtime"},      # no scrape can reach a Kafka client
    "spark": {KAFKA, "poll", "tap", "runtime"},
    "poll": {"serve", "spark", "runtime", "tap"},
    "tap": {"serve", "spark", "runtime", "poll"},
    "model": {"poll", "tap", "serve", "spark", "runtime", "health", "access"},
    "health": {"poll", "tap", "serve", "spark", "runtime", "access"},
    "in_flight": {"poll", "tap", "serve", "spark", "runtime", "access", "health"},
    "access": {"poll", "tap", "serve", "spark", "runtime", "health"},
}
HARNESS = ("txnwatch_dev", "tests", "bench")
# shared leaves -> the modules of txnwatch each may import: the alerts and the dashboards (and,
# for the fencing errors, the producer wrapper; for the trigger modes, the listener and the
# exporter's page) all read them, so anything a leaf imports reaches every one of its users
LEAVES = {
    "txnwatch.fencing": set(),
    "txnwatch.trigger_modes": set(),
    "txnwatch.alerts.config": set(),
    "txnwatch.alerts.labels": set(),
    "txnwatch.alerts.promql": {"txnwatch.fencing"},
    "txnwatch.dashboards.ids": set(),
}
# modules or packages -> packages they must never import: the producer wrapper serves any
# service's Kafka client and knows nothing of the rules and dashboards built on its series;
# the Kafka room serves the exporter, the canary and the Spark side and knows none of them
# The one module that writes to a cluster (abort markers) is `txnwatch abort`'s alone: the
# exporter, check and the rest stay read-only.
WRITES = ("txnwatch.kafka.abort_markers", "txnwatch.remediation")
NEVER = {"txnwatch.producer": ("txnwatch.alerts", "txnwatch.dashboards", *WRITES),
         KAFKA: (EXPORTER, "txnwatch.canary", "txnwatch.spark_listener"),
         **{owner: WRITES for owner in (EXPORTER, "txnwatch.check", "txnwatch.canary", "txnwatch.spark_listener",
                                         "txnwatch.pipeline")}}
# The Kafka client libraries: librdkafka's binding, and kafka-python (`kafka`). Their clients
# are made in the Kafka room only, kafka-python is used there only, and the serving side
# imports neither.
CLIENT_LIBRARIES = ("confluent_kafka", "kafka")
CLIENTS = frozenset({"AdminClient", "Consumer", "Producer", "DeserializingConsumer", "SerializingProducer",
                     "KafkaAdminClient", "KafkaClient", "KafkaConsumer", "KafkaProducer"})
NO_CLIENT_LIBRARY = (f"{EXPORTER}.serve", f"{EXPORTER}.spark")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) of every import in the file; relative
    imports resolved; `from pkg import name` yields pkg.name where that is a module."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        level = id(node) in top
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, level) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, node.lineno, level))
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if (root / Path(*sub.split("."))).with_suffix(".py").exists() or \
                        (root / Path(*sub.split(".")) / "__init__.py").exists():
                    out.append((sub, node.lineno, level))
    return out


def graph(root: Path, package: str) -> dict[str, list[tuple[str, int, bool]]]:
    return {module_name(p, root): [i for i in imports(p, root) if i[0].split(".")[0] in (package,) + HARNESS]
            for p in sorted((root / package).rglob("*.py"))}


def layer(module: str) -> str | None:
    """The exporter's layer of a module (serve, poll, model, ...), KAFKA for the Kafka room."""
    if within(module, KAFKA):
        return KAFKA
    if not module.startswith(EXPORTER + "."):
        return None
    return module.split(".")[2]


def room(module: str) -> str | None:
    """The room of TIERS a module is in (None: in none)."""
    if module == "txnwatch":
        return module
    return max((r for tier in TIERS for r in tier if r != "txnwatch" and within(module, r)), key=len, default=None)


def violations(root: Path, package: str = "txnwatch") -> list[str]:
    g = graph(root, package)
    found = [f"{mod} is in no room of TIERS: give its room a tier" for mod in g if room(mod) is None]
    for mod, edges in g.items():
        for target, line, _ in edges:
            if target.split(".")[0] in HARNESS:
                found.append(f"{mod}:{line} imports the harness ({target}): nothing shipped may")
            src, dst = layer(mod), layer(target)
            if src and dst and dst in FORBIDDEN.get(src, ()):
                found.append(f"{mod}:{line} imports {target}: {src} must not import {dst}")
            found += [f"{mod}:{line} imports {target}: {why}" for why in house_rules(mod, target, package)]
    found += client_rules(root, package)
    found += [f"import circle: {' -> '.join(c)}" for c in cycles(g)]
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def house_rules(mod: str, target: str, package: str) -> list[str]:
    """What importing `target` from `mod` breaks of TIERS, LEAVES and NEVER."""
    out = []
    here, there = room(mod), room(target) if within(target, package) else None
    if here and there and TIER[there] > TIER[here]:
        out.append(f"nothing imports upward: {here} is below {there}")
    allowed = LEAVES.get(mod)
    if allowed is not None and within(target, package) and target not in allowed:
        out.append(f"a shared leaf may import {' and '.join(sorted(allowed)) or f'nothing of {package}'}")
    out += [f"{owner} must not import {pkg}" for owner, pkgs in NEVER.items() if within(mod, owner)
            for pkg in pkgs if within(target, pkg)]
    return out


def client_rules(root: Path, package: str = "txnwatch") -> list[str]:
    """Imports of the Kafka client libraries that break their rules (see CLIENT_LIBRARIES)."""
    out = []
    for p in sorted((root / package).rglob("*.py")):
        mod = module_name(p, root)
        for library, names, line in library_imports(p):
            if library.split(".")[0] not in CLIENT_LIBRARIES:
                continue
            if any(within(mod, m) for m in NO_CLIENT_LIBRARY):
                out.append(f"{mod}:{line} imports {library}: serve/ and spark/ never import a Kafka client library")
            elif not within(mod, KAFKA) and library.split(".")[0] == "kafka":
                out.append(f"{mod}:{line} imports {library}: kafka-python is used in {KAFKA} only")
            elif not within(mod, KAFKA) and CLIENTS & set(names):
                out += [f"{mod}:{line} imports {library}.{n}: Kafka clients are made in {KAFKA} (clients.py)"
                        for n in sorted(CLIENTS & set(names))]
    return out


def library_imports(path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, names taken from it, line) of every absolute import in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, (), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.module, tuple(a.name for a in node.names), node.lineno))
    return out


def cycles(g: dict[str, list[tuple[str, int, bool]]]) -> list[list[str]]:
    """Circles among the modules, counting every import (a function-level one too: a lazy
    import that only dodges a circle is still a circle)."""
    edges = {m: sorted({t for t, _, _ in es if t in g and t != m and not m.startswith(t + ".")})
             for m, es in g.items()}
    out, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in edges[m]:
            if state.get(t) == 1:
                out.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    return out


PROCESS_MODULES = frozenset({"subprocess", "multiprocessing"})


def process_starting(root: Path, package: str = "txnwatch_dev") -> set[str]:
    """Modules of the harness that start processes, or import one of the harness that does
    (package __init__s aside: importing a module runs them, but they start nothing)."""
    direct = {module_name(p, root) for p in (root / package).rglob("*.py")
              if any(m.split(".")[0] in PROCESS_MODULES for m, _, _ in imports(p, root))}
    g = graph(root, package)
    out = set(direct)
    changed = True
    while changed:
        changed = False
        for mod, edges in g.items():
            if mod not in out and any(t in out for t, _, _ in edges):
                out.add(mod)
                changed = True
    return out


def impure_harness_in_unit_tests(root: Path) -> list[str]:
    starting = process_starting(root)
    return [f"{p.relative_to(root)}:{line} imports {target}, which starts processes"
            for p in sorted((root / "tests" / "unit").glob("*.py"))
            for target, line, _ in imports(p, root) if target in starting]


def test_the_shipped_package_keeps_its_layers_and_has_no_import_circle():
    assert violations(ROOT) == []


def test_unit_tests_use_only_the_pure_parts_of_the_harness():
    assert impure_harness_in_unit_tests(ROOT) == []


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


BASE = {"txnwatch/__init__.py": "", "txnwatch/kafka/__init__.py": "", "txnwatch/kafka/answers.py": "",
        "txnwatch/kafka/admin.py": "from .answers import X\n", "txnwatch/exporter/__init__.py": "",
        "txnwatch/exporter/model.py": "from ..kafka.answers import X\n",
        "txnwatch/exporter/serve/__init__.py": "", "txnwatch/exporter/serve/page.py": "from ..model import X\n",
        "txnwatch/exporter/poll/__init__.py": "", "txnwatch/exporter/poll/poller.py": "from ...kafka import admin\n"}


@pytest.mark.parametrize("change, expected", [
    ({"txnwatch/exporter/serve/page.py": "from ...kafka.admin import KafkaIO\n"},
     "txnwatch.exporter.serve.page:1 imports txnwatch.kafka.admin: serve must not import txnwatch.kafka"),
    ({"txnwatch/exporter/serve/page.py": "def f():\n    from txnwatch.exporter.poll import poller\n"},
     "txnwatch.exporter.serve.page:2 imports txnwatch.exporter.poll: serve must not import poll"),
    ({"txnwatch/exporter/serve/page.py": "from confluent_kafka import TopicPartition\n"},
     "txnwatch.exporter.serve.page:1 imports confluent_kafka: serve/ and spark/ never import a Kafka client library"),
    ({"txnwatch/kafka/admin.py": "from ..exporter.poll.poller import P\n"},
     "txnwatch.kafka.admin:1 imports txnwatch.exporter.poll.poller: txnwatch.kafka must not import txnwatch.exporter"),
    ({"txnwatch/kafka/admin.py": "from ..exporter.model import Finding\n"},
     "txnwatch.kafka.admin:1 imports txnwatch.exporter.model: nothing imports upward: txnwatch.kafka is below "
     "txnwatch.exporter"),
    ({"txnwatch/canary/__init__.py": "", "txnwatch/canary/probe.py": "def f():\n    from confluent_kafka import Producer\n"},
     "txnwatch.canary.probe:2 imports confluent_kafka.Producer: Kafka clients are made in txnwatch.kafka (clients.py)"),
    ({"txnwatch/canary/__init__.py": "", "txnwatch/canary/probe.py": "from txnwatch.exporter.model import X\n"},
     "txnwatch.canary.probe:1 imports txnwatch.exporter.model: nothing imports upward: txnwatch.canary is below "
     "txnwatch.exporter"),
    ({"txnwatch/exporter/tap/__init__.py": "", "txnwatch/exporter/tap/source.py": "from kafka.structs import TopicPartition\n"},
     "txnwatch.exporter.tap.source:1 imports kafka.structs: kafka-python is used in txnwatch.kafka only"),
    ({"txnwatch/cli.py": "import txnwatch_dev.demo\n"},
     "txnwatch.cli:1 imports the harness (txnwatch_dev.demo): nothing shipped may"),
    ({"txnwatch/exporter/poll/aborts.py": "from ...kafka.abort_markers import MarkerWriter\n"},
     "txnwatch.exporter.poll.aborts:1 imports txnwatch.kafka.abort_markers: txnwatch.exporter must not import "
     "txnwatch.kafka.abort_markers"),
    ({"txnwatch/playbooks.py": ""}, "txnwatch.playbooks is in no room of TIERS: give its room a tier"),
    ({"txnwatch/exporter/model.py": "def f():\n    from . import health\n",
      "txnwatch/exporter/health.py": "from .model import X\n"},
     "import circle: txnwatch.exporter.health -> txnwatch.exporter.model -> txnwatch.exporter.health"),
    ({"txnwatch/spark_listener/__init__.py": "", "txnwatch/spark_listener/sink.py":
      "from txnwatch.kafka.admin import KafkaIO\ndef f():\n    from txnwatch.exporter.poll import poller\n"},
     "txnwatch.spark_listener.sink:3 imports txnwatch.exporter.poll: nothing imports upward: txnwatch.spark_listener "
     "is below txnwatch.exporter"),
    ({"txnwatch/spark_listener/__init__.py": "", "txnwatch/spark_listener/state.py": "",
      "txnwatch/producer.py": "from txnwatch.spark_listener.state import SparkQueryState\n"},
     "txnwatch.producer:1 imports txnwatch.spark_listener.state: nothing imports upward: txnwatch.producer is below "
     "txnwatch.spark_listener"),
    ({"txnwatch/spark_listener/__init__.py": "", "txnwatch/spark_listener/trigger.py": "",
      "txnwatch/alerts/__init__.py": "", "txnwatch/alerts/rules.py":
      "from txnwatch.spark_listener.trigger import LONG_BATCH_MODES\n"},
     "txnwatch.alerts.rules:1 imports txnwatch.spark_listener.trigger: nothing imports upward: txnwatch.alerts is "
     "below txnwatch.spark_listener"),
    ({"txnwatch/fencing.py": "from txnwatch.exporter.model import X\n"},
     "txnwatch.fencing:1 imports txnwatch.exporter.model: a shared leaf may import nothing of txnwatch"),
    ({"txnwatch/fencing.py": "", "txnwatch/dashboards/__init__.py": "", "txnwatch/dashboards/ids.py": "",
      "txnwatch/alerts/__init__.py": "", "txnwatch/alerts/promql.py":
      "from txnwatch.fencing import FENCING_ERRORS\nfrom txnwatch.dashboards.ids import PANEL_IDS\n"},
     "txnwatch.alerts.promql:2 imports txnwatch.dashboards.ids: a shared leaf may import txnwatch.fencing"),
    ({"txnwatch/alerts/__init__.py": "", "txnwatch/alerts/promql.py": "",
      "txnwatch/producer.py": "def f():\n    from txnwatch.alerts.promql import FENCED\n"},
     "txnwatch.producer:2 imports txnwatch.alerts.promql: txnwatch.producer must not import txnwatch.alerts"),
])
def test_the_rule_catches_a_broken_import(tmp_path, change, expected):
    write(tmp_path, BASE)
    assert violations(tmp_path) == []
    write(tmp_path, change)
    assert expected in violations(tmp_path)


def test_a_unit_test_importing_a_process_starting_harness_module_is_caught(tmp_path):
    write(tmp_path, {"txnwatch_dev/__init__.py": "", "txnwatch_dev/net.py": "import socket\n",
                     "txnwatch_dev/procs.py": "import subprocess\n",
                     "txnwatch_dev/transactions/__init__.py": "",
                     "txnwatch_dev/transactions/workload.py": "from ..procs import run\n",
                     "tests/unit/test_a.py": "from txnwatch_dev.net import wait_for\n"})
    assert impure_harness_in_unit_tests(tmp_path) == []
    write(tmp_path, {"tests/unit/test_a.py": "from txnwatch_dev.net import wait_for\n"
                     "from txnwatch_dev.transactions.workload import ProducerProcess\n"})
    assert impure_harness_in_unit_tests(tmp_path) == [
        "tests/unit/test_a.py:2 imports txnwatch_dev.transactions.workload, which starts processes"]


def test_no_test_module_name_is_both_a_unit_and_an_integration_test():
    """pytest imports test files by basename (no packages under tests/): one run given both
    folders stops at the second with "import file mismatch"."""
    tests = Path(__file__).resolve().parents[1]
    unit = {p.name for p in (tests / "unit").glob("test_*.py")}
    integration = {p.name for p in (tests / "integration").glob("test_*.py")}
    assert not unit & integration, f"rename one of each: {sorted(unit & integration)}"
