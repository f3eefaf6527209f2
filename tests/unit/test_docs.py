import re
from collections.abc import Iterator
from pathlib import Path

from txnwatch.metrics.docs import render

ROOT = Path(__file__).resolve().parents[2]


def test_metrics_doc_matches_the_catalogue():
    committed = (ROOT / "docs" / "metrics.md").read_text()
    assert committed == render(), "docs/metrics.md is stale: run `.venv/bin/python -m txnwatch.metrics.docs`"


def test_every_metric_name_follows_conventions():
    from txnwatch.metrics import CATALOG

    for s in CATALOG.values():
        assert s.name.startswith(("kafka_", "spark_", "txnwatch_")), s.name
        assert not s.name.endswith("_total"), f"{s.name}: counters are declared without _total"
        if s.kind == "histogram":
            assert s.buckets and list(s.buckets) == sorted(s.buckets), s.name
            assert s.name.endswith("_seconds"), s.name
        assert "cluster" in s.labels or s.source in ("client", "spark", "self"), s.name


def _prose_lines(text: str) -> list[str]:
    """The lines of a Markdown file, with those of fenced code blocks blanked."""
    out, fence = [], None
    for line in text.splitlines():
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
        elif m:
            fence = m.group(1)
            out.append("")
        else:
            out.append(line)
    return out


def anchors(path: Path) -> Iterator[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces
    to dashes, a repeated one numbered."""
    seen: dict[str, int] = {}
    for line in _prose_lines(path.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def test_every_relative_link_of_the_docs_resolves():
    """README.md, CONTRIBUTING.md, SECURITY.md, docs/ and the chart's README: every relative
    link names a file of the checkout and, into a Markdown file, one of its headings."""
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "SECURITY.md",
             *sorted((ROOT / "docs").rglob("*.md")), ROOT / "charts" / "txnwatch" / "README.md"]
    broken = []
    for path in files:
        for number, line in enumerate(_prose_lines(path.read_text()), 1):
            for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):        # http:, https:, mailto:
                    continue
                file, _, anchor = target.partition("#")
                dest = (path.parent / file).resolve() if file else path
                where = f"{path.relative_to(ROOT)}:{number}: ({target})"
                if not dest.exists():
                    broken.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in set(anchors(dest)):
                    broken.append(f"{where}: {dest.relative_to(ROOT)} has no heading #{anchor}")
    assert not broken, "\n".join(broken)
