"""Prometheus alerting and recording rules (see `txnwatch.alerts.rules`) and their runbooks
(docs/runbooks/<AlertName>.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from txnwatch.alerts.config import AlertConfig


def generate_alerts(out_dir: str | Path, config: AlertConfig | None = None) -> list[Path]:
    """Write rules.yml and prometheusrule.yaml into out_dir; returns the paths written."""
    from txnwatch.alerts.rules import generate_alerts as _generate

    return _generate(out_dir, config)


__all__ = ["generate_alerts"]
