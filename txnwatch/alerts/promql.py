"""PromQL building blocks of both generators: the alert rules (alerts/rules.py) and the
dashboards (dashboards/build.py) write a selector, an outcome, the fencing errors and the
abort ratio the same way, so a panel shows what its alert evaluates.

A leaf beside config.py and labels.py: both generators import it, and it imports only the
fencing error names (txnwatch.fencing), which the producer wrapper shares."""

from __future__ import annotations

from txnwatch.fencing import FENCING_ERRORS

ABORTED = 'outcome="aborted"'
COMMITTED = 'outcome="committed"'
# the producer's transaction errors that mean it was fenced (kafka_producer_transaction_errors_total)
FENCED = 'error=~"' + "|".join(FENCING_ERRORS) + '"'


def matchers(*parts: str) -> str:
    """`{a, b}` from the non-empty matchers, and `` when none is left: a selector configured
    empty (client_selector, say) leaves neither a stray comma nor empty braces."""
    present = [m for m in parts if m]
    return "{" + ", ".join(present) + "}" if present else ""


def abort_ratio(metric: str, by: str, window: str, *, aborted: str, completed: str,
                multiline: bool = False) -> str:
    """Aborted over completed transactions of counter `metric` per `by`; `aborted` and
    `completed` are the two selectors (`matchers(...)`). Where none aborted, the `or 0 *`
    branch gives 0 rather than no value. `multiline` spreads it over lines, as the rule
    file shows it."""
    aborted_rate = _sum_rate(metric, by, aborted, window)
    completed_rate = _sum_rate(metric, by, completed, window)
    if multiline:
        return f"(\n  {aborted_rate}\n  or\n  0 * {completed_rate}\n)\n/ {completed_rate}"
    return f"({aborted_rate} or 0 * {completed_rate}) / {completed_rate}"


def _sum_rate(metric: str, by: str, selector: str, window: str) -> str:
    return f"sum by ({by}) (rate({metric}{selector}[{window}]))"
