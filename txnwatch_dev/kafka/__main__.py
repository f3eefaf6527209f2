"""`python -m txnwatch_dev.kafka [SPEC ...]`: resolve Apache Kafka releases from Maven
Central ahead of a run (scripts/bootstrap.sh); SPEC as KAFKA_VERSION (default: 4)."""

from __future__ import annotations

import os
import sys

from .release import CACHE, DEFAULT_LINE, BrokerUnavailable, kafka_release


def main(argv: list[str] | None = None) -> int:
    specs = (argv if argv is not None else sys.argv[1:]) or [os.environ.get("KAFKA_VERSION") or DEFAULT_LINE]
    try:
        for spec in specs:
            r = kafka_release(spec)
            print(f"{spec}: {r.describe()}, classpaths in {CACHE / r.version}")
    except BrokerUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
