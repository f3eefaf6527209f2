"""The canary's series, rendered from its stats (no broker)."""

from txnwatch.canary.rounds import TimedOut, Violation, Visible
from txnwatch.canary.stats import CanaryStats, render_canary
from txnwatch.metrics import FamilyWriter


def exposition(stats: CanaryStats) -> str:
    w = FamilyWriter()
    render_canary(w, "prod", stats.view())
    return "".join(f.decode() if isinstance(f, bytes) else "" for f in _texts(w))


def _texts(w: FamilyWriter):
    from prometheus_client.exposition import generate_latest

    class Reg:
        def collect(self):
            return w.families()

    yield generate_latest(Reg())


def test_every_canary_series_with_its_labels():
    s = CanaryStats()
    s.init(0.042)
    s.committed(0.012)
    s.round_ended("committed", 1_700_000_000.0)
    s.round_ended("aborted", 1_700_000_010.0)
    s.seen(Visible(0, 0.02))
    s.seen(Visible(1, 0.03))
    s.seen(TimedOut(2, 7))
    s.seen(Violation(1, 9))
    s.seen(None)
    s.failed("commit", "REQUEST_TIMED_OUT", "commit_transaction timed out after 10 s")
    text = exposition(s)
    for line in ('txnwatch_canary_init_seconds{kafka_cluster="prod"} 0.042',
                 'txnwatch_canary_commit_seconds_count{kafka_cluster="prod"} 1.0',
                 'txnwatch_canary_visibility_seconds_count{kafka_cluster="prod",partition="0"} 1.0',
                 'txnwatch_canary_visibility_seconds_count{kafka_cluster="prod",partition="1"} 1.0',
                 'txnwatch_canary_rounds_total{kafka_cluster="prod",outcome="committed"} 1.0',
                 'txnwatch_canary_rounds_total{kafka_cluster="prod",outcome="aborted"} 1.0',
                 'txnwatch_canary_failures_total{error="timed_out",kafka_cluster="prod",stage="visibility_timeout"} 1.0',
                 'txnwatch_canary_failures_total{error="REQUEST_TIMED_OUT",kafka_cluster="prod",stage="commit"} 1.0',
                 'txnwatch_canary_visibility_timeouts_total{kafka_cluster="prod",partition="2"} 1.0',
                 'txnwatch_canary_visibility_violations_total{kafka_cluster="prod"} 1.0',
                 'txnwatch_canary_last_success_timestamp_seconds{kafka_cluster="prod"} 1.70000001e+09'):
        assert line in text, (line, text)
    assert s.view().last_failure == ("commit", "REQUEST_TIMED_OUT", "commit_transaction timed out after 10 s")


def test_a_fresh_canary_says_zero_violations_and_rounds_not_absent():
    text = exposition(CanaryStats())
    assert 'txnwatch_canary_visibility_violations_total{kafka_cluster="prod"} 0.0' in text
    assert 'txnwatch_canary_rounds_total{kafka_cluster="prod",outcome="committed"} 0.0' in text
    assert "txnwatch_canary_last_success_timestamp_seconds{" not in text     # no round ended yet


def test_restore_continues_an_earlier_process_counts():
    earlier = CanaryStats()
    earlier.committed(0.01)
    earlier.round_ended("committed", 100.0)
    earlier.seen(Visible(0, 0.02))
    earlier.seen(Violation(0, 3))
    earlier.failed("init", "COORDINATOR_NOT_AVAILABLE")
    now = CanaryStats()
    now.round_ended("committed", 200.0)
    now.restore(earlier.view())
    v = now.view()
    assert v.rounds == {"committed": 2} and v.commit.count == 1 and v.visibility[0].count == 1
    assert v.violations == 1 and v.failures == {("init", "COORDINATOR_NOT_AVAILABLE"): 1}
    assert v.last_success == 200.0
