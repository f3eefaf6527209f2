"""A scrape's text, parsed: samples by name and labels, with a small query helper (pure; the
tests, the demo and the benchmarks read /metrics through it)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted label items): value} from Prometheus text format."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


class Metrics(dict):
    """Parsed samples with a small query helper."""

    def get_value(self, name: str, **labels) -> float | None:
        want = {k: str(v) for k, v in labels.items()}
        for (n, lbls), v in self.items():
            if n == name and all(dict(lbls).get(k) == val for k, val in want.items()):
                return v
        return None

    def select(self, name: str, **labels) -> list[tuple[dict, float]]:
        want = {k: str(v) for k, v in labels.items()}
        return [(dict(lbls), v) for (n, lbls), v in self.items()
                if n == name and all(dict(lbls).get(k) == val for k, val in want.items())]


def sample_lines_per_family(text: str) -> dict[str, int]:
    """The sample lines under each TYPE line of a text exposition (0.0.4): the series each
    family carries, counted without the exporter's help."""
    lines: dict[str, int] = {}
    family = None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
        elif line and not line.startswith("#"):
            lines[family] = lines.get(family, 0) + 1
    return lines
