"""The sharding plan and hash (pure)."""

from __future__ import annotations

import pytest

from txnwatch.sharding import ALL, Shard, ShardError, from_flags, plan, stable_hash


def test_every_partition_has_exactly_one_owner_and_topics_spread():
    shards = [Shard(i, 3) for i in range(3)]
    owners = {}
    for topic in ("orders", "payments", "a" * 200, "ünïcode"):
        for p in range(300):
            who = [s.index for s in shards if s.owns_partition(topic, p)]
            assert len(who) == 1
            owners.setdefault(topic, []).append(who[0])
    for topic, ws in owners.items():
        assert {ws.count(i) for i in range(3)} == {100}, topic   # consecutive partitions rotate


@pytest.mark.parametrize("by_topic", [False, True])
@pytest.mark.parametrize("total", [1, 2, 3, 7])
def test_a_shards_partitions_of_a_topic_are_those_it_owns(total, by_topic):
    for topic in ["orders", "payments-eu", "t", "ünïcode", "a-much-longer-topic-name.with.dots"]:
        for count in (0, 1, 5, 100):
            shards = [Shard(i, total, by_topic) for i in range(total)]
            shares = [s.partitions_of(topic, count) for s in shards]
            for s, share in zip(shards, shares, strict=True):
                assert list(share) == [p for p in range(count) if s.owns_partition(topic, p)]
            assert sorted(p for share in shares for p in share) == list(range(count))
            if by_topic and count:      # the whole topic on one replica
                assert sum(1 for share in shares if share) == 1


def test_topics_kept_whole_spread_over_the_replicas_and_only_where_asked():
    shards = [Shard(i, 3, by_topic=True) for i in range(3)]
    owners = [next(s.index for s in shards if s.owns_partition(f"topic-{t}", 0)) for t in range(300)]
    assert all(80 <= owners.count(i) <= 120 for i in range(3)), [owners.count(i) for i in range(3)]
    shares = plan(["a", "b"], Shard(1, 3), whole_topics={"a"})
    assert shares["a"].split == Shard(1, 3, by_topic=True) and shares["b"].split == Shard(1, 3)


def test_log_partitions_and_keys_split_without_overlap():
    shards = [Shard(i, 4) for i in range(4)]
    for p in range(50):
        assert sum(s.owns_log_partition(p) for s in shards) == 1
    for app in ("balance-app", "orders", "txnwatch-canary", "x"):
        assert sum(s.owns_key(app) for s in shards) == 1


def test_hash_is_stable_across_processes():
    assert stable_hash("orders") == 3845127662    # CRC-32: the same everywhere, unlike hash()


def test_plan_whole_clusters_when_there_are_enough_else_split_within():
    names = ["a", "b", "c", "d", "e"]
    shares = [plan(names, Shard(i, 3)) for i in range(3)]
    for n in names:
        assert sum(s[n].watch for s in shares) == 1 and all(s[n].split == ALL for s in shares)
    one = [plan(["big"], Shard(i, 3))["big"] for i in range(3)]
    assert all(s.watch for s in one) and [s.split.index for s in one] == [0, 1, 2]
    assert [s.cluster_level for s in one] == [True, False, False]
    assert plan(["big"], ALL)["big"].cluster_level


def test_flags_and_statefulset_ordinal():
    assert from_flags(None, None, env={}) == ALL
    assert from_flags("2", 3, env={}) == Shard(2, 3)
    assert from_flags("auto", 3, env={"HOSTNAME": "txnwatch-1"}) == Shard(1, 3)
    assert from_flags(None, 3, env={"POD_NAME": "txnwatch-exporter-2", "HOSTNAME": "node"}) == Shard(2, 3)
    with pytest.raises(ShardError, match="ordinal"):
        from_flags("auto", 3, env={"HOSTNAME": "laptop"})
    with pytest.raises(ShardError, match=r"0\.\.2"):
        from_flags("3", 3, env={})
    with pytest.raises(ShardError, match="number or auto"):
        from_flags("x", 3, env={})
    with pytest.raises(ShardError, match=">= 1"):
        Shard(0, 0)
