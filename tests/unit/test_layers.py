"""The house's rules, read from the imports (ast, nothing imported): no import circle in
txnwatch/, the exporter's layers (txnwatch/exporter/__init__.py draws them), the shared
leaves importing only what they may, the producer wrapper never importing the generators,
the shipped package never importing the test and demo harness (txnwatch_dev) or the tests,
and the unit tests using only the harness's pure modules (none that starts a process, or
imports one that does)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# exporter layer -> layers of the exporter it must never import
EXPORTER = "txnwatch.exporter"
FORBIDDEN = {
    "serve": {"kafka", "poll", "tap", "runtime"},      # no scrape can reach a Kafka client
    "spark": {"kafka", "poll", "tap", "runtime"},
    "kafka": {"poll", "tap", "serve", "spark", "runtime", "health", "access"},   # only the model
    "poll": {"serve", "spark", "runtime", "tap"},
    "tap": {"serve", "spark", "runtime", "poll"},
    "model": {"kafka", "poll", "tap", "serve", "spark", "runtime", "health", "access"},
    "health": {"kafka", "poll", "tap", "serve", "spark", "runtime", "access"},
    "access": {"poll", "tap", "serve", "spark", "runtime", "health"},
}
HARNESS = ("txnwatch_dev", "tests", "bench")
# packages outside the exporter -> the exporter layers they may use: the sink (on Spark's
# executors) asks the brokers through the exporter's Kafka client layer, which imports only
# the model, and never pulls in the server, the poller or the tap
OUTSIDE = {"txnwatch.spark_listener": {"kafka", "model"}}
# shared leaves -> the modules of txnwatch each may import: the alerts and the dashboards (and,
# for the fencing errors, the producer wrapper) all read them, so anything a leaf imports
# reaches every one of its users
LEAVES = {
    "txnwatch.fencing": set(),
    "txnwatch.alerts.config": set(),
    "txnwatch.alerts.labels": set(),
    "txnwatch.alerts.promql": {"txnwatch.fencing"},
    "txnwatch.dashboards.ids": set(),
}
# modules or packages -> packages they must never import: the producer wrapper serves any
# service's Kafka client and knows nothing of the rules and dashboards built on its series
NEVER = {"txnwatch.producer": ("txnwatch.alerts", "txnwatch.dashboards")}


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
    if not module.startswith(EXPORTER + "."):
        return None
    return module.split(".")[2]


def violations(root: Path, package: str = "txnwatch") -> list[str]:
    g = graph(root, package)
    found = []
    for mod, edges in g.items():
        for target, line, _ in edges:
            if target.split(".")[0] in HARNESS:
                found.append(f"{mod}:{line} imports the harness ({target}): nothing shipped may")
            for pkg, allowed in OUTSIDE.items():
                if (mod == pkg or mod.startswith(pkg + ".")) and layer(target) and layer(target) not in allowed:
                    found.append(f"{mod}:{line} imports {target}: {pkg} may use only the exporter's "
                                 f"{' and '.join(sorted(allowed))} layers")
            src, dst = layer(mod), layer(target)
            if src and dst and dst in FORBIDDEN.get(src, ()):
                found.append(f"{mod}:{line} imports {target}: {src} must not import {dst}")
            found += [f"{mod}:{line} imports {target}: {why}" for why in house_rules(mod, target, package)]
    found += [f"import circle: {' -> '.join(c)}" for c in cycles(g)]
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def house_rules(mod: str, target: str, package: str) -> list[str]:
    """What importing `target` from `mod` breaks of LEAVES and NEVER."""
    out = []
    allowed = LEAVES.get(mod)
    if allowed is not None and within(target, package) and target not in allowed:
        out.append(f"a shared leaf may import {' and '.join(sorted(allowed)) or f'nothing of {package}'}")
    out += [f"{owner} must not import {pkg}" for owner, pkgs in NEVER.items() if within(mod, owner)
            for pkg in pkgs if within(target, pkg)]
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


BASE = {"txnwatch/__init__.py": "", "txnwatch/exporter/__init__.py": "",
        "txnwatch/exporter/model.py": "", "txnwatch/exporter/kafka/__init__.py": "",
        "txnwatch/exporter/kafka/admin.py": "from ..model import X\n",
        "txnwatch/exporter/serve/__init__.py": "", "txnwatch/exporter/serve/page.py": "from ..model import X\n",
        "txnwatch/exporter/poll/__init__.py": "", "txnwatch/exporter/poll/poller.py": "from ..kafka import admin\n"}


@pytest.mark.parametrize("change, expected", [
    ({"txnwatch/exporter/serve/page.py": "from ..kafka.admin import KafkaIO\n"},
     "txnwatch.exporter.serve.page:1 imports txnwatch.exporter.kafka.admin: serve must not import kafka"),
    ({"txnwatch/exporter/serve/page.py": "def f():\n    from txnwatch.exporter.poll import poller\n"},
     "txnwatch.exporter.serve.page:2 imports txnwatch.exporter.poll: serve must not import poll"),
    ({"txnwatch/exporter/kafka/admin.py": "from ..poll.poller import P\n"},
     "txnwatch.exporter.kafka.admin:1 imports txnwatch.exporter.poll.poller: kafka must not import poll"),
    ({"txnwatch/cli.py": "import txnwatch_dev.demo\n"},
     "txnwatch.cli:1 imports the harness (txnwatch_dev.demo): nothing shipped may"),
    ({"txnwatch/exporter/model.py": "def f():\n    from . import health\n",
      "txnwatch/exporter/health.py": "from .model import X\n"},
     "import circle: txnwatch.exporter.health -> txnwatch.exporter.model -> txnwatch.exporter.health"),
    ({"txnwatch/spark_listener/__init__.py": "", "txnwatch/spark_listener/sink.py":
      "from txnwatch.exporter.kafka.admin import KafkaIO\ndef f():\n    from txnwatch.exporter.poll import poller\n"},
     "txnwatch.spark_listener.sink:3 imports txnwatch.exporter.poll: txnwatch.spark_listener may use only the "
     "exporter's kafka and model layers"),
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
