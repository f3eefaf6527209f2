"""The tap's per-id state machine and its rendering: pure, no I/O, explicit clocks."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from prometheus_client.parser import text_string_to_metric_families

from txnwatch.apps import AppResolver
from txnwatch.exporter.tap.decoder import TxnLogValue, TxnStatus
from txnwatch.exporter.tap.render import render_tap
from txnwatch.exporter.tap.state import TxnLogState

E, ON, PC, PA, CC, CA, DEAD, PEF = range(8)
T0 = 1_700_000_000_000  # ms


def v(status, epoch, *, start=-1, last, timeout=60_000, pid=1000, tv=0, parts=None):
    version = 1 if tv else 0
    partitions = parts if parts is not None else ((("orders", (0,)),) if status in (ON, PC, PA) else None)
    return TxnLogValue(version, pid, epoch, timeout, TxnStatus(status), partitions, last, start,
                       client_transaction_version=tv)


def new_state(**kw):
    return TxnLogState(AppResolver(), **kw)


def play(state, tid, records, counting=True):
    for value in records:
        ts = value.last_update_ms if value is not None else T0
        state.apply(tid, value, ts, ts, counting)


def commit_history(epoch=0, start=T0, tv=0, prepare_after=1500, complete_after=1520):
    bump = 1 if tv >= 2 else 0
    return [
        v(E, epoch, last=start - 100, tv=tv),
        v(ON, epoch, start=start, last=start, tv=tv),
        v(ON, epoch, start=start, last=start + 10, tv=tv),
        v(PC, epoch + bump, start=start, last=start + prepare_after, tv=tv),
        v(CC, epoch + bump, start=start, last=start + complete_after, tv=tv),
    ]


def metrics(state, now_ms, cap=500, idle=True):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    from txnwatch.metrics import FamilyWriter

    view = state.view(state.idle_scan(cap, now_ms) if idle else None, cap=cap)
    w = FamilyWriter()
    folded = render_tap(w, "c1", view, now=now_ms / 1000.0)
    assert not w.invalid

    class _C(Collector):
        def collect(self):
            return w.families()

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_C())
    text = generate_latest(reg).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out, folded


def sample(ms, name, **labels):
    return ms.get((name, tuple(sorted({"kafka_cluster": "c1", **labels}.items()))))


def test_commit():
    st = new_state()
    play(st, "orders-producer-1", commit_history())
    ms, _ = metrics(st, T0 + 5000)
    app = "orders-producer"
    assert sample(ms, "kafka_transactions_total", app=app, outcome="committed") == 1
    assert sample(ms, "kafka_transactions_total", app=app, outcome="aborted") == 0
    assert sample(ms, "kafka_transaction_duration_seconds_count", app=app, outcome="committed") == 1
    assert sample(ms, "kafka_transaction_duration_seconds_sum", app=app, outcome="committed") == \
        pytest.approx(1.52)
    assert sample(ms, "kafka_transaction_duration_seconds_bucket", app=app, outcome="committed",
                  le="2.5") == 1
    assert sample(ms, "kafka_transaction_duration_seconds_bucket", app=app, outcome="committed",
                  le="1.0") == 0
    assert sample(ms, "kafka_transaction_completion_seconds_sum", app=app, outcome="committed") == \
        pytest.approx(0.02)
    assert sample(ms, "kafka_transaction_completion_seconds_bucket", app=app, outcome="committed",
                  le="0.025") == 1
    assert sample(ms, "kafka_transaction_fencing_events_total", app=app, reason="timeout") == 0
    assert sample(ms, "kafka_transaction_fencing_events_total", app=app, reason="new_instance") == 0
    assert sample(ms, "kafka_transaction_open", app=app) == 0
    assert sample(ms, "kafka_transactional_ids", app=app) == 1


def test_client_abort_is_not_a_fence():
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0), v(ON, 3, start=T0, last=T0),
                     v(PA, 3, start=T0, last=T0 + 200), v(CA, 3, start=T0, last=T0 + 210)])
    ms, _ = metrics(st, T0 + 1000)
    assert sample(ms, "kafka_transactions_total", app="p", outcome="aborted") == 1
    assert sample(ms, "kafka_transaction_completion_seconds_sum", app="p", outcome="aborted") == \
        pytest.approx(0.01)
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="new_instance") == 0
    assert sample(ms, "kafka_transaction_timeouts_total", app="p") == 0


@pytest.mark.parametrize("tv", [0, 1, 2])
def test_timeout_abort(tv):
    """The coordinator's timeout bumps the epoch once on every line since 4.0.1 (and twice
    on 4.0.0); what makes it a timeout is the clock, not the size of the bump."""
    for bump in (1, 2):
        st = new_state()
        play(st, "p-1", [v(E, 3, last=T0, tv=tv), v(ON, 3, start=T0, last=T0, timeout=10_000, tv=tv),
                         # coordinator's check runs after start + timeout
                         v(PA, 3 + bump, start=T0, last=T0 + 14_000, timeout=10_000, tv=tv),
                         v(CA, 3 + bump, start=T0, last=T0 + 14_050, timeout=10_000, tv=tv)])
        ms, _ = metrics(st, T0 + 20_000)
        assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="timeout") == 1
        assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="new_instance") == 0
        assert sample(ms, "kafka_transaction_timeouts_total", app="p") == 1
        assert sample(ms, "kafka_transactions_total", app="p", outcome="aborted") == 1
        assert sample(ms, "kafka_transaction_duration_seconds_sum", app="p", outcome="aborted") == \
            pytest.approx(14.05)


def test_a_ctv0_client_timed_out_on_a_tv2_cluster():
    """librdkafka (CTV 0) on a 4.x cluster: the coordinator's abort carries CTV 2 and one
    bump (the shape captured from Kafka 4.4)."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0, tv=1), v(ON, 0, start=T0, last=T0 + 7, timeout=3000, tv=1),
                     v(PA, 1, start=T0 + 7, last=T0 + 3105, timeout=3000, tv=2),
                     v(CA, 1, start=T0 + 7, last=T0 + 3109, timeout=3000, tv=2)])
    ms, _ = metrics(st, T0 + 5000)
    assert sample(ms, "kafka_transaction_timeouts_total", app="p") == 1


@pytest.mark.parametrize("tv", [0, 1, 2])
def test_fence_by_new_instance_with_a_transaction_open(tv):
    """Ongoing(e) -> PrepareAbort(e+1) -> CompleteAbort(e+1) -> Empty(e+2) on every line:
    one abort and one new instance (counted at its InitProducerId)."""
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0, tv=tv), v(ON, 3, start=T0, last=T0, tv=tv),
                     # InitProducerId from a new instance 5 s later (timeout 60 s not reached)
                     v(PA, 4, start=T0, last=T0 + 5000, tv=tv),
                     v(CA, 4, start=T0, last=T0 + 5010, tv=tv),
                     v(E, 5, last=T0 + 5100, tv=tv)])   # the new instance's retry
    ms, _ = metrics(st, T0 + 6000)
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="new_instance") == 1
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="timeout") == 0
    assert sample(ms, "kafka_transaction_timeouts_total", app="p") == 0
    assert sample(ms, "kafka_transactions_total", app="p", outcome="aborted") == 1


@pytest.mark.parametrize("tv", [0, 2])
def test_a_new_instance_taking_an_idle_id_over_is_a_reinit_not_a_fence(tv):
    """A restart, or a task moved to another worker: churn, counted apart, never paged."""
    bump = 1 if tv >= 2 else 0
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0, tv=tv), v(ON, 0, start=T0, last=T0, tv=tv),
                     v(PC, bump, start=T0, last=T0 + 20, tv=tv), v(CC, bump, start=T0, last=T0 + 21, tv=tv),
                     v(E, bump + 1, last=T0 + 900, tv=tv)])
    ms, _ = metrics(st, T0 + 1000)
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="new_instance") == 0
    assert sample(ms, "kafka_transactional_id_reinitializations_total", app="p") == 1
    assert sample(ms, "kafka_transactions_total", app="p", outcome="committed") == 1


def test_registration_and_reregistration_after_expiry_are_no_fences():
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0), None, v(E, 0, pid=2000, last=T0 + 10)])
    ms, _ = metrics(st, T0 + 1000)
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="new_instance") == 0


def test_operator_fence_is_told_apart_by_the_admin_timeout():
    """forceTerminateTransaction (Admin.fenceProducers) re-inits the id with the admin
    client's 30 s request timeout, captured from Kafka 4.4."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0),
                     v(PA, 1, start=T0, last=T0 + 700, tv=2), v(CA, 1, start=T0, last=T0 + 701, tv=2),
                     v(E, 2, last=T0 + 800, timeout=30_000, tv=2),
                     # then the producer itself comes back with its own timeout: a re-init
                     v(E, 3, last=T0 + 5000, timeout=60_000, tv=2)])
    ms, _ = metrics(st, T0 + 6000)
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="operator") == 1
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="new_instance") == 0
    assert sample(ms, "kafka_transactional_id_reinitializations_total", app="p") == 1
    assert sample(ms, "kafka_transaction_timeouts_total", app="p") == 0


def test_tv2_completion_bumps_and_epoch_exhaustion_are_no_fences():
    st = new_state()
    tid = "p-1"
    history = [v(E, 0, last=T0, tv=2)]
    e = 0
    t = T0
    for _ in range(3):   # three commits and an abort: the epoch bumps each time
        history += [v(ON, e, start=t, last=t, tv=2), v(PC, e + 1, start=t, last=t + 50, tv=2),
                    v(CC, e + 1, start=t, last=t + 60, tv=2)]
        e += 1
        t += 1000
    history += [v(ON, e, start=t, last=t, tv=2), v(PA, e + 1, start=t, last=t + 30, tv=2),
                v(CA, e + 1, start=t, last=t + 40, tv=2)]
    e += 1
    t += 1000
    # empty abort (TV2 allows PrepareAbort from CompleteAbort without partitions)
    history += [v(PA, e + 1, start=t, last=t, tv=2), v(CA, e + 1, start=t, last=t + 5, tv=2)]
    e += 1
    t += 1000
    # an exhausted epoch: the completion moves on to a new producer id at epoch 0
    history += [v(ON, 32766, start=t, last=t, tv=2), v(PC, 32767, start=t, last=t + 9, tv=2),
                v(CC, 0, pid=2000, start=t, last=t + 10, tv=2), v(ON, 0, pid=2000, start=t + 50, last=t + 50, tv=2),
                v(PC, 1, pid=2000, start=t + 50, last=t + 60, tv=2), v(CC, 1, pid=2000, start=t + 50, last=t + 61, tv=2)]
    play(st, tid, history)
    ms, _ = metrics(st, t + 100)
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="new_instance") == 0
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="timeout") == 0
    assert sample(ms, "kafka_transactions_total", app="p", outcome="committed") == 5
    assert sample(ms, "kafka_transactions_total", app="p", outcome="aborted") == 2
    assert sample(ms, "kafka_transactional_ids", app="p") == 1


def test_prepare_epoch_fence_record_reads_like_a_prepare_abort():
    st = new_state()
    play(st, "p-1", [v(ON, 3, start=T0, last=T0), v(PEF, 4, start=T0, last=T0 + 100),
                     v(PA, 4, start=T0, last=T0 + 100), v(CA, 4, start=T0, last=T0 + 110),
                     v(E, 5, last=T0 + 200)])
    ms, _ = metrics(st, T0 + 1000)
    assert sample(ms, "kafka_transaction_fencing_events_total", app="p", reason="new_instance") == 1
    assert sample(ms, "kafka_transactions_total", app="p", outcome="aborted") == 1


def test_open_transactions_headroom_and_age():
    st = new_state()
    play(st, "a-1", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0, timeout=60_000)])
    play(st, "a-2", [v(E, 0, last=T0), v(ON, 0, start=T0 + 10_000, last=T0 + 10_000, timeout=30_000)])
    play(st, "b-1", [v(E, 0, last=T0), v(ON, 0, start=T0 + 1000, last=T0 + 1000),
                     v(PC, 0, start=T0 + 1000, last=T0 + 2000)])
    now = T0 + 25_000
    ms, folded = metrics(st, now)
    assert sample(ms, "kafka_transaction_open", app="a") == 2
    assert sample(ms, "kafka_transaction_open", app="b") == 1
    assert sample(ms, "kafka_transaction_oldest_open_age_seconds", app="a") == pytest.approx(25.0)
    assert sample(ms, "kafka_transaction_oldest_open_age_seconds", app="b") == pytest.approx(24.0)
    assert sample(ms, "kafka_transaction_timeout_headroom_seconds", app="a", transactional_id="a-1") == \
        pytest.approx(35.0)
    assert sample(ms, "kafka_transaction_timeout_headroom_seconds", app="a", transactional_id="a-2") == \
        pytest.approx(15.0)
    assert folded["kafka_transaction_timeout_headroom_seconds"] == 0
    # past the timeout: negative headroom
    ms, _ = metrics(st, T0 + 70_000)
    assert sample(ms, "kafka_transaction_timeout_headroom_seconds", app="a", transactional_id="a-1") == \
        pytest.approx(-10.0)


def test_cap_folds_per_app_into_other():
    st = new_state()
    for i in range(10):
        play(st, f"a-{i}", [v(ON, 0, start=T0 + i * 1000, last=T0 + i * 1000)])
    ms, folded = metrics(st, T0 + 20_000, cap=3)
    ids = {dict(k[1]).get("transactional_id") for k in ms if k[0] == "kafka_transaction_timeout_headroom_seconds"}
    assert ids == {"a-0", "a-1", "a-2", "__other__"}
    assert folded["kafka_transaction_timeout_headroom_seconds"] == 7
    # __other__ carries the minimum headroom of the folded ids (a-3)
    assert sample(ms, "kafka_transaction_timeout_headroom_seconds", app="a", transactional_id="__other__") \
        == pytest.approx((T0 + 3000 + 60_000 - (T0 + 20_000)) / 1000)


def test_expiration_and_idle_headroom():
    st = new_state(expiration_ms=3_600_000)
    play(st, "x-1", commit_history(start=T0))
    play(st, "x-2", commit_history(start=T0 + 60_000))
    now = T0 + 600_000
    ms, _ = metrics(st, now)
    # x-1 idle since T0 + 1520
    assert sample(ms, "kafka_transactional_id_expiration_headroom_seconds", app="x", transactional_id="x-1") \
        == pytest.approx(3600 - (600_000 - 1520) / 1000)
    assert sample(ms, "kafka_transactional_ids", app="x") == 2
    play(st, "x-1", [None])
    ms, _ = metrics(st, now)
    assert sample(ms, "kafka_transactional_id_expirations_total", app="x") == 1
    assert sample(ms, "kafka_transactional_ids", app="x") == 1
    assert "x-1" not in st
    assert sample(ms, "kafka_transactional_id_expiration_headroom_seconds", app="x", transactional_id="x-1") \
        is None
    # a tombstone for an unknown id (or a repeated one) is not counted
    play(st, "x-1", [None])
    play(st, "never-seen", [None])
    ms, _ = metrics(st, now)
    assert sample(ms, "kafka_transactional_id_expirations_total", app="x") == 1


def test_idle_cap_folds():
    st = new_state()
    for i in range(6):
        play(st, f"x-{i}", [v(E, 0, last=T0 + i)])
    play(st, "y-1", [v(E, 0, last=T0 + 100)])
    play(st, "z-1", [v(ON, 0, start=T0, last=T0)])   # open: not idle
    idle = st.idle_scan(2, T0)
    assert [k[0] for k in idle.kept] == ["x-0", "x-1"]
    assert idle.folded == 5
    assert dict(idle.folded_min) == {"x": T0 + 2, "y": T0 + 100}


def test_rebuild_does_not_count_history_but_later_records_count():
    st = new_state()
    # history, as found in the log at start
    play(st, "r-1", commit_history(start=T0), counting=False)
    play(st, "r-2", [v(E, 1, last=T0), v(ON, 1, start=T0, last=T0), v(PA, 2, start=T0, last=T0 + 5000)],
         counting=False)
    play(st, "r-3", [v(E, 0, last=T0), None], counting=False)
    play(st, "r-4", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0 + 1)], counting=False)
    ms, _ = metrics(st, T0 + 6000)
    assert sample(ms, "kafka_transactions_total", app="r", outcome="committed") == 0
    assert sample(ms, "kafka_transaction_fencing_events_total", app="r", reason="new_instance") == 0
    assert sample(ms, "kafka_transactional_id_expirations_total", app="r") == 0
    assert sample(ms, "kafka_transaction_open", app="r") == 2       # r-2 (PrepareAbort), r-4
    assert sample(ms, "kafka_transactional_ids", app="r") == 3
    assert ("kafka_transaction_duration_seconds_count",
            (("app", "r"), ("kafka_cluster", "c1"), ("outcome", "committed"))) not in ms
    # after the rebuild: r-2's completion is counted (it happened after start), r-4 commits
    play(st, "r-2", [v(CA, 2, start=T0, last=T0 + 5100)])
    play(st, "r-4", [v(PC, 0, start=T0, last=T0 + 7000), v(CC, 0, start=T0, last=T0 + 7010)])
    ms, _ = metrics(st, T0 + 8000)
    assert sample(ms, "kafka_transactions_total", app="r", outcome="aborted") == 1
    assert sample(ms, "kafka_transactions_total", app="r", outcome="committed") == 1
    assert sample(ms, "kafka_transaction_completion_seconds_sum", app="r", outcome="aborted") == \
        pytest.approx(0.1)
    assert sample(ms, "kafka_transaction_open", app="r") == 0


def test_repeated_completion_record_counts_once():
    st = new_state()
    h = commit_history()
    play(st, "d-1", h + [h[-1]])
    ms, _ = metrics(st, T0 + 5000)
    assert sample(ms, "kafka_transactions_total", app="d", outcome="committed") == 1


def test_dead_record_frees_like_a_tombstone():
    st = new_state()
    play(st, "d-1", [v(E, 0, last=T0), v(DEAD, 0, last=T0 + 1)])
    assert "d-1" not in st and len(st) == 0


def test_skipped_and_position_render():
    st = new_state()
    st.skip("truncated")
    st.skip("truncated")
    st.skip("unknown_value_version")
    play(st, "a-1", [v(E, 0, last=T0)])
    ms, _ = metrics(st, T0)
    assert sample(ms, "txnwatch_tap_records_skipped_total", reason="truncated") == 2
    assert sample(ms, "txnwatch_tap_records_skipped_total", reason="unknown_value_version") == 1
    assert sample(ms, "txnwatch_tap_records_applied_total") == 1
    assert sample(ms, "txnwatch_tap_rebuilt") == 0
    assert sample(ms, "txnwatch_tap_last_record_timestamp_seconds") == pytest.approx(T0 / 1000)


def test_view_is_a_snapshot():
    st = new_state()
    play(st, "s-1", commit_history())
    view = st.view()
    play(st, "s-1", commit_history(start=T0 + 10_000))
    assert view.transactions[("s", "committed")] == 1
    assert view.duration[("s", "committed")].count == 1
    assert st.view().transactions[("s", "committed")] == 2


def test_expired_ids_free_memory():
    """Churn: ids that expire release their memory (slots are reused). The resolver keeps
    one id here: AppResolver memoises ids itself (a cache bounded by its size)."""
    st = TxnLogState(AppResolver(builtins=False, cache_size=1))

    def churn(n, base):
        for i in range(n):
            tid = f"churn-{base + i}"
            st.apply(tid, v(E, 0, last=T0 + i), T0, T0, True)
            st.apply(tid, None, T0, T0, True)

    churn(2000, 0)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    churn(20_000, 10_000)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(st) == 0
    assert after - before < 50_000, after - before


def test_two_phase_commit_transactions_render_apart_and_without_headroom():
    st = new_state()
    play(st, "xa-1", [v(E, 0, last=T0, timeout=2_147_483_647), v(ON, 0, start=T0, last=T0, timeout=2_147_483_647)])
    play(st, "xa-2", [v(E, 0, last=T0, timeout=60_000), v(ON, 0, start=T0 + 5000, last=T0 + 5000)])
    ms, _ = metrics(st, T0 + 10_000)
    assert sample(ms, "kafka_transaction_open", app="xa") == 2
    assert sample(ms, "kafka_transaction_two_phase_open", app="xa") == 1
    assert sample(ms, "kafka_transaction_two_phase_oldest_age_seconds", app="xa") == pytest.approx(10.0)
    assert sample(ms, "kafka_transaction_oldest_open_age_seconds", app="xa") == pytest.approx(5.0)
    assert sample(ms, "kafka_transaction_timeout_headroom_seconds", app="xa", transactional_id="xa-2") == \
        pytest.approx(55.0)
    assert sample(ms, "kafka_transaction_timeout_headroom_seconds", app="xa", transactional_id="xa-1") is None


def test_ids_outside_the_configured_filter_are_not_followed():
    st = TxnLogState(AppResolver(), id_filter=lambda tid: tid.startswith("keep-"))
    play(st, "keep-1", commit_history())
    play(st, "drop-1", commit_history())
    ms, _ = metrics(st, T0 + 5000)
    assert sample(ms, "kafka_transactions_total", app="keep", outcome="committed") == 1
    assert sample(ms, "kafka_transactions_total", app="drop", outcome="committed") is None
    assert "drop-1" not in st


# ---------------------------------------------------------------- Flink's KafkaSink (a re-initialising scheme)
# Shapes from a real PyFlink job (flink-connector-kafka 5.0.0-2.2, kafka-clients 4.2: TV2) on
# Kafka 4.4: INCREMENTING naming writes a new id <prefix>-<subtask>-<checkpoint> per checkpoint;
# POOLING re-initialises <prefix>-<subtask>-<n> at every checkpoint; a start-up probes (or
# lists) ids a failed run may have left open and initialises them, aborting what is open.

def flink_reasons(st, app="orders-sink"):
    ms, _ = metrics(st, T0 + 120_000)
    return {r: sample(ms, "kafka_transaction_fencing_events_total", app=app, reason=r)
            for r in ("new_instance", "timeout", "operator", "startup_abort")}


def test_flink_incrementing_ids_and_pooled_reinits_are_no_fences():
    st = new_state()
    for ckpt in (1, 2, 3):   # INCREMENTING: one new id per checkpoint, committed (TV2 bump)
        play(st, f"orders-sink-0-{ckpt}", commit_history(epoch=0, start=T0 + ckpt * 2000, tv=2))
    # POOLING: the same id initialised again at every checkpoint, idle or after a commit
    pooled = [v(E, 0, last=T0, tv=2)]
    for i in range(3):
        t = T0 + 10_000 * (i + 1)
        e = pooled[-1].producer_epoch + 1
        pooled += [v(E, e, last=t, tv=2), v(ON, e, start=t + 5, last=t + 5, tv=2),
                   v(PC, e + 1, start=t + 5, last=t + 900, tv=2), v(CC, e + 1, start=t + 5, last=t + 910, tv=2)]
    play(st, "orders-sink-1-0", pooled)
    # a start-up probe of an id the last run had committed
    play(st, "orders-sink-0-3", [v(E, 2, last=T0 + 50_000, tv=2)])
    assert flink_reasons(st) == {"new_instance": 0, "timeout": 0, "operator": 0, "startup_abort": 0}
    ms, _ = metrics(st, T0 + 120_000)
    assert sample(ms, "kafka_transactions_total", app="orders-sink", outcome="committed") == 6


def test_flink_startup_abort_of_a_transaction_left_open_is_its_own_reason():
    st = new_state()
    play(st, "orders-sink-0-7", [v(E, 0, last=T0, tv=2), v(ON, 0, start=T0, last=T0, tv=2),
                                 # the job was killed; its restart (20 s later) probes the id
                                 v(PA, 1, start=T0, last=T0 + 20_000, tv=2),
                                 v(CA, 1, start=T0, last=T0 + 20_012, tv=2),
                                 v(E, 2, last=T0 + 20_015, tv=2)])
    assert flink_reasons(st) == {"new_instance": 0, "timeout": 0, "operator": 0, "startup_abort": 1}
    ms, _ = metrics(st, T0 + 120_000)
    assert sample(ms, "kafka_transactions_total", app="orders-sink", outcome="aborted") == 1
    # the same records for a plain producer's id: a fence by a new instance
    st = new_state()
    play(st, "orders-producer", [v(E, 0, last=T0, tv=2), v(ON, 0, start=T0, last=T0, tv=2),
                                 v(PA, 1, start=T0, last=T0 + 20_000, tv=2),
                                 v(CA, 1, start=T0, last=T0 + 20_012, tv=2), v(E, 2, last=T0 + 20_015, tv=2)])
    assert flink_reasons(st, "orders-producer")["new_instance"] == 1


def test_flink_timeout_then_restart_is_a_timeout_and_a_client_abort_then_reinit_is_nothing():
    st = new_state()
    # open past its 60 s timeout: the coordinator aborts it; the restart's probe comes later
    play(st, "orders-sink-0-8", [v(E, 0, last=T0, tv=2), v(ON, 0, start=T0, last=T0, tv=2),
                                 v(PA, 1, start=T0, last=T0 + 61_000, tv=2),
                                 v(CA, 1, start=T0, last=T0 + 61_010, tv=2), v(E, 2, last=T0 + 90_000, tv=2)])
    # the job aborted its own transaction (a failed checkpoint), pooled id re-initialised 30 s later
    play(st, "orders-sink-1-1", [v(E, 0, last=T0, tv=2), v(ON, 0, start=T0, last=T0, tv=2),
                                 v(PA, 1, start=T0, last=T0 + 1_000, tv=2),
                                 v(CA, 1, start=T0, last=T0 + 1_010, tv=2), v(E, 2, last=T0 + 31_010, tv=2)])
    assert flink_reasons(st) == {"new_instance": 0, "timeout": 1, "operator": 0, "startup_abort": 0}


def test_a_user_rule_can_name_the_flink_scheme():
    import re

    from txnwatch.apps import AppRule

    resolver = AppResolver([AppRule(re.compile(r"^etl\.(?P<job>\w+)\.\d+\.\d+$"), r"\g<job>", "flink-kafkasink")])
    assert resolver.resolve("etl.orders.0.12") == ("orders", "flink-kafkasink")
    assert resolver.resolve("orders-sink-0-12") == ("orders-sink", "flink-kafkasink")
    assert resolver.resolve("plain") == ("plain", "")
    st = TxnLogState(resolver)
    play(st, "etl.orders.0.12", [v(E, 0, last=T0, tv=2), v(ON, 0, start=T0, last=T0, tv=2),
                                 v(PA, 1, start=T0, last=T0 + 5_000, tv=2),
                                 v(CA, 1, start=T0, last=T0 + 5_010, tv=2), v(E, 2, last=T0 + 5_020, tv=2)])
    assert flink_reasons(st, "orders")["startup_abort"] == 1


# ------------------------------------------------------------------ every condition of the rules, pinned
# Each case fails when one condition of its rule in state.py is deleted or its boundary moved
# (scripts/mutate_rules.py applies those one-line mutations and runs these tests).
def counts(st, app="p"):
    view = st.view()
    return {"timeout": view.fencing.get((app, "timeout"), 0), "new_instance": view.fencing.get((app, "new_instance"), 0),
            "operator": view.fencing.get((app, "operator"), 0), "reinit": view.reinits.get(app, 0)}


NONE = {"timeout": 0, "new_instance": 0, "operator": 0, "reinit": 0}


def test_timeout_needs_the_abort_to_follow_ongoing():
    """TV2: an abort with no partitions (PrepareAbort straight from CompleteCommit) long after
    the previous transaction: its start is the old one's, long past its timeout; no timeout."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0, tv=2), v(ON, 0, start=T0, last=T0, timeout=10_000, tv=2),
                     v(PC, 1, start=T0, last=T0 + 20, timeout=10_000, tv=2),
                     v(CC, 1, start=T0, last=T0 + 21, timeout=10_000, tv=2),
                     v(PA, 2, start=T0 + 200_000, last=T0 + 200_000, timeout=10_000, tv=2, parts=()),
                     v(CA, 2, start=T0 + 200_000, last=T0 + 200_001, timeout=10_000, tv=2, parts=())])
    assert counts(st) == NONE
    assert st.view().timeouts.get("p", 0) == 0


def test_timeout_needs_an_epoch_bump():
    """TV0: the client aborts its own transaction after its deadline, before the coordinator's
    check: the epoch stays, so it is the client's abort, not the coordinator's timeout."""
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0), v(ON, 3, start=T0, last=T0, timeout=10_000),
                     v(PA, 3, start=T0, last=T0 + 15_000, timeout=10_000),
                     v(CA, 3, start=T0, last=T0 + 15_010, timeout=10_000)])
    assert counts(st) == NONE


def test_timeout_needs_the_same_producer_id():
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0), v(ON, 3, start=T0, last=T0, timeout=10_000),
                     v(PA, 4, pid=2000, start=T0, last=T0 + 15_000, timeout=10_000),
                     v(CA, 4, pid=2000, start=T0, last=T0 + 15_010, timeout=10_000)])
    assert counts(st)["timeout"] == 0


def test_timeout_needs_a_known_start():
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0), v(ON, 3, start=-1, last=T0, timeout=10_000),
                     v(PA, 4, start=-1, last=T0 + 15_000, timeout=10_000),
                     v(CA, 4, start=-1, last=T0 + 15_010, timeout=10_000)])
    assert counts(st)["timeout"] == 0


@pytest.mark.parametrize("after, timeout", [(10_000, False), (10_001, True)])
def test_timeout_boundary_is_strictly_past_start_plus_timeout(after, timeout):
    """The coordinator aborts once start + timeout < now: at exactly start + timeout the
    abort is another's (a fence), one millisecond later it is the timeout."""
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0), v(ON, 3, start=T0, last=T0, timeout=10_000),
                     v(PA, 4, start=T0, last=T0 + after, timeout=10_000),
                     v(CA, 4, start=T0, last=T0 + after + 1, timeout=10_000)])
    assert counts(st)["timeout"] == (1 if timeout else 0)


def test_a_restart_with_a_30s_timeout_already_is_no_operator_fence():
    """A producer whose transaction.timeout.ms is 30 s anyway restarts: a re-init, not the
    admin client's fence (whose mark is the timeout changing to 30 s)."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0, timeout=30_000), v(ON, 0, start=T0, last=T0, timeout=30_000),
                     v(PC, 0, start=T0, last=T0 + 20, timeout=30_000), v(CC, 0, start=T0, last=T0 + 21, timeout=30_000),
                     v(E, 1, last=T0 + 5000, timeout=30_000)])
    assert counts(st) == {**NONE, "reinit": 1}


def test_a_new_instance_of_a_30s_producer_cutting_an_open_transaction_is_new_instance():
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0, timeout=30_000), v(ON, 0, start=T0, last=T0, timeout=30_000),
                     v(PA, 1, start=T0, last=T0 + 700, timeout=30_000, tv=2),
                     v(CA, 1, start=T0, last=T0 + 701, timeout=30_000, tv=2),
                     v(E, 2, last=T0 + 800, timeout=30_000, tv=2)])
    assert counts(st) == {**NONE, "new_instance": 1}


def test_an_operator_fence_of_an_idle_id_is_an_operator_fence():
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0), v(PC, 0, start=T0, last=T0 + 20),
                     v(CC, 0, start=T0, last=T0 + 21), v(E, 1, last=T0 + 5000, timeout=30_000)])
    assert counts(st) == {**NONE, "operator": 1}


@pytest.mark.parametrize("ongoing_tv, gap, fence", [(0, 10_000, True), (0, 10_001, False), (1, 10_000, True),
                                                      (2, 500, True), (2, 501, False)])
def test_new_instance_window_after_the_aborts_completion(ongoing_tv, gap, fence):
    """The new instance's retry lands within FENCE_RETRY_WINDOW_MS of the abort it caused; a
    later init is a restart after that abort. Below TV2 only the coordinator bumps at an abort
    (with CTV 2 on a 4.x cluster); a TV2 client's own abort bumps too, and a restart after it
    writes the same records: there the retry must land within TV2_FENCE_RETRY_WINDOW_MS."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0, tv=ongoing_tv), v(ON, 0, start=T0, last=T0, tv=ongoing_tv),
                     v(PA, 1, start=T0, last=T0 + 500, tv=2), v(CA, 1, start=T0, last=T0 + 501, tv=2),
                     v(E, 2, last=T0 + 501 + gap, tv=2)])
    assert counts(st) == ({**NONE, "new_instance": 1} if fence else {**NONE, "reinit": 1})


def own_aborts_then(tv, restart_after, *, t=T0):
    """An id commits 3 times and aborts 2 of its own transactions (the last one last), its
    process exits and starts again `restart_after` ms after that abort completed, then a second
    instance cuts the restarted one's open transaction off: the shape and times captured from
    Kafka 4.4 (tests/fixtures/txnlog/, scenario step `restart`)."""
    bump = 1 if tv >= 2 else 0
    out, e = [v(E, 0, last=t, tv=tv)], 0
    for i, outcome in enumerate(("commit", "commit", "abort", "commit", "abort")):
        s = t + 100 + i * 50
        prepare, complete = (PC, CC) if outcome == "commit" else (PA, CA)
        out += [v(ON, e, start=s, last=s, tv=tv), v(prepare, e + bump, start=s, last=s + 11, tv=tv),
                v(complete, e + bump, start=s, last=s + 13, tv=tv)]
        e += bump
    aborted = out[-1].last_update_ms
    s = aborted + restart_after + 100
    out += [v(E, e + 1, last=aborted + restart_after, tv=tv), v(ON, e + 1, start=s, last=s, tv=tv),
            # the second instance's InitProducerId, 1.4 s later: the coordinator's abort (CTV 2 on
            # a 4.x cluster, one bump on every line), then that instance's retry
            v(PA, e + 2, start=s, last=s + 1425, tv=2), v(CA, e + 2, start=s, last=s + 1426, tv=2),
            v(E, e + 3, last=s + 1426 + (118 if tv >= 2 else 502), tv=2)]
    return out


@pytest.mark.parametrize("tv", [0, 2])
def test_a_restart_after_the_clients_own_abort_is_a_reinit_and_the_second_instance_the_fence(tv):
    """The restart came 1.49 s after the client's own abort: a re-init on every line, also
    under TV2, where that abort bumped the epoch as a fence's does; the second instance, whose
    retry lands 0.12 s (Java) or 0.5 s (librdkafka) after the abort it caused, is the fence."""
    st = new_state()
    play(st, "p-1", own_aborts_then(tv, restart_after=1490))
    assert counts(st) == {**NONE, "new_instance": 1, "reinit": 1}
    assert st.view().transactions == {("p", "committed"): 3, ("p", "aborted"): 3}


@pytest.mark.parametrize("tv", [0, 2])
def test_a_crash_loop_after_its_own_aborts_is_no_fence_storm(tv):
    """A process that aborts its transaction, exits and is restarted, over and over (each
    restart 0.6 s to 10 s after the abort): re-inits only, on every line."""
    st = new_state()
    bump = 1 if tv >= 2 else 0
    history, e, t = [v(E, 0, last=T0, tv=tv)], 0, T0
    for restart_after in (600, 1000, 3000, 10_000, 10_001):
        history += [v(ON, e, start=t + 10, last=t + 10, tv=tv), v(PA, e + bump, start=t + 10, last=t + 20, tv=tv),
                    v(CA, e + bump, start=t + 10, last=t + 22, tv=tv),
                    v(E, e + bump + 1, last=t + 22 + restart_after, tv=tv)]
        e, t = e + bump + 1, t + 22 + restart_after
    play(st, "p-1", history)
    assert counts(st) == {**NONE, "reinit": 5}


def test_a_tv2_reinit_within_the_retry_window_of_its_own_abort_reads_as_a_fence():
    """The one case the log cannot tell apart (state.py's docstring): a TV2 client's own abort
    and an InitProducerId for its id 0.1 s later (a producer re-created in the same process)
    write exactly a fence's records, and count as one."""
    st = new_state()
    play(st, "p-1", own_aborts_then(2, restart_after=118)[:-4])     # up to the re-init
    assert counts(st) == {**NONE, "new_instance": 1}


def test_new_instance_needs_the_abort_to_have_bumped_the_epoch():
    """TV0: the client aborts its own transaction (no bump) and a new instance starts at once:
    nothing was open when it initialised."""
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0), v(ON, 3, start=T0, last=T0), v(PA, 3, start=T0, last=T0 + 200),
                     v(CA, 3, start=T0, last=T0 + 210), v(E, 4, last=T0 + 300)])
    assert counts(st) == {**NONE, "reinit": 1}


def test_an_empty_abort_after_a_fence_does_not_carry_the_fence_over():
    """TV2: a fence's abort, then an abort with no partitions (not after Ongoing), then an init:
    the init came after that second abort, which cut nothing off."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0, tv=2), v(ON, 0, start=T0, last=T0, tv=2),
                     v(PA, 1, start=T0, last=T0 + 500, tv=2), v(CA, 1, start=T0, last=T0 + 501, tv=2),
                     v(PA, 2, start=T0 + 600, last=T0 + 600, tv=2, parts=()),
                     v(CA, 2, start=T0 + 600, last=T0 + 601, tv=2, parts=()),
                     v(E, 3, last=T0 + 700, tv=2)])
    assert counts(st) == {**NONE, "reinit": 1}


def test_an_empty_with_the_same_producer_and_epoch_is_no_init():
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0), v(PC, 0, start=T0, last=T0 + 20),
                     v(CC, 0, start=T0, last=T0 + 21), v(E, 0, last=T0 + 500)])
    assert counts(st) == NONE


def test_a_new_producer_id_at_the_same_epoch_is_an_init():
    """An InitProducerId whose epoch ran out gets a new producer id at epoch 0."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0), v(PC, 0, start=T0, last=T0 + 20),
                     v(CC, 0, start=T0, last=T0 + 21), v(E, 0, pid=2000, last=T0 + 500)])
    assert counts(st) == {**NONE, "reinit": 1}


# ------------------------------------------------------------------ the rest of the tap's rules, pinned
# (scripts/mutate_rules.py: each test fails when the rule it names is deleted or moved)
def test_a_reused_slot_does_not_carry_the_previous_ids_bumped_abort():
    """A's transaction is cut off by an epoch-bumping abort, then A expires and B takes its
    freed slot: B's second InitProducerId cut nothing off (B never had a transaction open),
    so it is a re-init, not a new_instance fence inherited from A."""
    st = new_state()
    play(st, "a-1", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0),
                     v(PA, 1, start=T0, last=T0 + 500), v(CA, 1, start=T0, last=T0 + 501), None])
    assert len(st) == 0
    play(st, "b-1", [v(E, 0, pid=2000, last=T0 + 1000), v(E, 1, pid=2000, last=T0 + 1500)])
    assert counts(st, "a") == NONE
    assert counts(st, "b") == {**NONE, "reinit": 1}


def test_a_completion_with_an_unknown_start_has_no_duration():
    """start -1: no duration to observe (from -1 it would be 54 years); it is still counted,
    with its completion latency."""
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0), v(ON, 3, start=-1, last=T0),
                     v(PA, 3, start=-1, last=T0 + 200), v(CA, 3, start=-1, last=T0 + 210)])
    view = st.view()
    assert view.transactions[("p", "aborted")] == 1
    assert view.completion[("p", "aborted")].count == 1
    assert ("p", "aborted") not in view.duration


def test_a_second_completion_with_another_start_is_another_transaction():
    """A tap lagging behind the log cleaner reads a compacted stretch: the next transaction's
    completion follows the last one's without its Ongoing and Prepare. It is counted, with its
    duration, but with no completion latency (its Prepare is gone)."""
    st = new_state()
    play(st, "p-1", commit_history(start=T0) + [v(CC, 0, start=T0 + 5000, last=T0 + 5300)])
    view = st.view()
    assert view.transactions[("p", "committed")] == 2
    assert view.duration[("p", "committed")].count == 2
    assert view.completion[("p", "committed")].count == 1


def test_durations_and_latencies_never_go_negative():
    """A coordinator that moved to a broker whose clock is behind stamps the completion before
    its start and its Prepare: both observe 0, never a negative sum."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0 - 200), v(ON, 0, start=T0, last=T0), v(PC, 0, start=T0, last=T0 + 500),
                     v(CC, 0, start=T0, last=T0 - 100)])
    view = st.view()
    assert view.duration[("p", "committed")].count == 1 and view.duration[("p", "committed")].sum == 0.0
    assert view.completion[("p", "committed")].count == 1 and view.completion[("p", "committed")].sum == 0.0


def test_a_prepare_epoch_fence_is_open_and_a_prepare_of_its_completion():
    st = new_state()
    play(st, "p-1", [v(E, 3, last=T0), v(ON, 3, start=T0, last=T0), v(PEF, 4, start=T0, last=T0 + 100)])
    assert [t.status for t in st.open_transactions()] == [TxnStatus.PREPARE_EPOCH_FENCE]
    play(st, "p-1", [v(CA, 4, start=T0, last=T0 + 130)])
    assert st.open_count == 0
    assert st.view().completion[("p", "aborted")].sum == pytest.approx(0.03)


def test_an_expired_id_leaves_the_open_transactions():
    """A tombstone (or Dead) frees the id whatever its state: nothing stays open for it."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0), None])
    assert st.open_count == 0 and st.open_transactions() == ()


def test_restored_counters_continue_and_the_earlier_view_stays_as_it_was():
    """A restarted worker starts from the last view's counters (none goes backwards); the
    histograms are copies: counting on does not change the view they came from."""
    st = new_state()
    play(st, "p-1", commit_history())
    play(st, "p-1", [v(ON, 0, start=T0 + 2000, last=T0 + 2000), v(PA, 1, start=T0 + 2000, last=T0 + 4000),
                     v(CA, 1, start=T0 + 2000, last=T0 + 4010), v(E, 2, last=T0 + 4100)])   # new_instance
    play(st, "p-2", [v(E, 0, last=T0), v(ON, 0, start=T0, last=T0, timeout=1000),
                     v(PA, 1, start=T0, last=T0 + 5000, timeout=1000), v(CA, 1, start=T0, last=T0 + 5010, timeout=1000),
                     v(E, 2, last=T0 + 60_000, timeout=1000), None])
    st.skip("truncated")
    before = st.view()
    assert before.fencing == {("p", "new_instance"): 1, ("p", "timeout"): 1}
    assert before.reinits == {"p": 1} and before.timeouts == {"p": 1} and before.expirations == {"p": 1}

    restored = new_state()
    restored.restore_counters(before)
    after = restored.view()
    for name in ("transactions", "fencing", "reinits", "timeouts", "expirations", "skipped", "applied"):
        assert getattr(after, name) == getattr(before, name), name
    for name in ("duration", "completion"):
        assert {k: (h.counts, h.sum) for k, h in getattr(after, name).items()} == \
            {k: (h.counts, h.sum) for k, h in getattr(before, name).items()}, name
    play(restored, "p-1", commit_history(start=T0 + 100_000))
    assert restored.view().transactions[("p", "committed")] == 2
    assert before.duration[("p", "committed")].count == 1
    assert before.completion[("p", "committed")].count == 1


def test_the_client_transaction_version_is_clamped_not_fatal():
    """ClientTransactionVersion is an int16 on the wire, held in a byte: any value applies."""
    st = new_state()
    play(st, "p-1", [v(E, 0, last=T0, tv=32767), v(ON, 0, start=T0, last=T0, tv=-32768)])
    assert st.status_of("p-1") == TxnStatus.ONGOING


def test_a_record_without_a_timestamp_keeps_the_last_one():
    st = new_state()
    st.apply("p-1", v(E, 0, last=T0), T0, T0, True)
    st.apply("p-1", v(ON, 0, start=T0, last=T0 + 5), None, T0 + 5, True)
    assert st.view().last_record_timestamp_ms == T0


def test_idle_scan_folds_each_apps_oldest_last_update_whatever_the_order():
    st = new_state()
    for tid, last in [("x-0", T0 + 50), ("x-1", T0 + 30), ("x-2", T0 + 10), ("x-3", T0 + 40)]:
        play(st, tid, [v(E, 0, last=last)])
    idle = st.idle_scan(1, T0 + 100)
    assert [k[0] for k in idle.kept] == ["x-2"]
    assert idle.folded == 3 and dict(idle.folded_min) == {"x": T0 + 30}


def test_apps_without_ids_leave_the_view_and_only_flink_apps_reinitialise():
    """An app whose every id expired drops out of the per-app gauges (its counters stay);
    only apps of a re-initialising scheme get the startup_abort reason."""
    st = new_state()
    play(st, "gone-1", [v(E, 0, last=T0), None])
    play(st, "orders-producer-1", [v(E, 0, last=T0)])
    play(st, "orders-sink-0-1", [v(E, 0, last=T0, tv=2)])
    view = st.view()
    assert dict(view.ids_per_app) == {"orders-producer": 1, "orders-sink": 1}
    assert view.expirations == {"gone": 1}
    assert view.reinit_apps == frozenset({"orders-sink"})


def test_a_flink_sinks_idle_ids_are_one_series_its_newest():
    """Flink's KafkaSink names an id per checkpoint (<prefix>-<subtask>-<checkpoint>) and never
    uses an old one again: its idle ids are one figure per app, the newest last update, so
    they neither make a series per checkpoint nor page as each old id nears expiration."""
    st = new_state(expiration_ms=3_600_000)
    for checkpoint in range(1, 6):
        play(st, f"enrich-0-{checkpoint}", commit_history(start=T0 + checkpoint * 10_000))
    play(st, "enrich-0-6", [v(ON, 0, start=T0 + 60_000, last=T0 + 60_000)])    # open: not idle
    play(st, "batch-1", commit_history(start=T0))                                # another scheme: per id
    idle = st.idle_scan(500, T0 + 100_000)
    assert [k[0] for k in idle.kept] == ["batch-1"] and idle.folded == 0
    assert dict(idle.newest) == {"enrich": T0 + 50_000 + 1520}
    ms, _ = metrics(st, T0 + 100_000)
    headrooms = {dict(lb)["transactional_id"]: val for (name, lb), val in ms.items()
                 if name == "kafka_transactional_id_expiration_headroom_seconds" and dict(lb)["app"] == "enrich"}
    assert headrooms == {"__newest__": pytest.approx(3600 - (100_000 - 51_520) / 1000)}
    assert sample(ms, "kafka_transactional_id_expiration_headroom_seconds", app="batch",
                  transactional_id="batch-1") == pytest.approx(3600 - (100_000 - 1520) / 1000)
