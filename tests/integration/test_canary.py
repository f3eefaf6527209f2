"""The transactional canary on the session's Kafka broker (one node: one canary partition)."""

from __future__ import annotations

import pytest

from txnwatch.canary.probe import CanaryProbe
from txnwatch.config import CanaryConfig
from txnwatch.devtools.net import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def test_canary_commits_aborts_and_every_committed_record_becomes_visible(broker, unique):
    cfg = CanaryConfig(enabled=True, interval_seconds=1.0, abort_every=3, topic=unique("canary"))
    probe = CanaryProbe("test", {"bootstrap.servers": broker.bootstrap}, cfg, instance=unique("i"))
    probe.start()
    try:
        v = wait_for(lambda: (lambda v: v if v.rounds.get("committed", 0) >= 4 and v.rounds.get("aborted", 0) >= 2
                              and sum(h.count for h in v.visibility.values()) >= 4 else None)(probe.view()),
                     60, what="4 committed and 2 aborted canary rounds, the committed ones visible")
    finally:
        probe.stop()
    assert v.violations == 0                                 # aborted records never returned
    assert dict(v.failures) == {}, v.last_failure
    assert v.init_seconds is not None and v.commit.count >= 4
    assert set(v.visibility) == {0}                          # one partition per broker
    assert v.last_success is not None
