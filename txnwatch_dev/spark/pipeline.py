"""The reference pipeline (txnwatch.pipeline) with faults in its sink's tasks, as a process the
tests and the demo start and kill:

    python -m txnwatch_dev.spark.pipeline --fault 'pause_before_commit={"batch": 2, "task": 0,
        "signal_file": "/tmp/paused"}' --bootstrap H:P --input-topic in ...

`--fault NAME=JSON` (repeatable; sink_faults.py names them) becomes the sink's fault plan;
every other flag is txnwatch.pipeline's own."""

from __future__ import annotations

import argparse
import json
import sys

from txnwatch import pipeline

from .sink_faults import SinkFaults


def fault_flags(argv: list[str]) -> tuple[dict[str, dict], list[str]]:
    """{fault name: its settings} from the --fault flags, and the other flags, in order."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--fault", action="append", default=[], metavar="NAME=JSON")
    a, rest = p.parse_known_args(argv)
    faults = {}
    for f in a.fault:
        name, _, settings = f.partition("=")
        faults[name] = json.loads(settings)
    return faults, rest


def settings(argv: list[str]) -> tuple[argparse.Namespace, pipeline.Settings]:
    """txnwatch.pipeline's flags and settings, with the fault plan as the sink's producer_factory."""
    faults, rest = fault_flags(argv)
    a = pipeline.parse_args(rest)
    s = pipeline.settings_from(a)
    s.producer_factory = SinkFaults.of(faults) if faults else None
    return a, s


def main(argv: list[str] | None = None) -> int:
    return pipeline.run(*settings(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
