"""Poll-cycle benchmark: txnwatch's full poll vs the bare requests it needs.

    .venv/bin/python bench/bench_poll.py [--partitions 10000] [--topics 100] [--groups 500] [--rounds 5]

Starts its own broker (Apache Kafka from Maven Central, KAFKA_VERSION; a KRaft cluster past
15,000 partitions, see bench_scrape.broker_for), creates `--topics` topics sharing
`--partitions` partitions, commits offsets for `--groups` consumer groups, then times
  floor: the same requests as a poll, sent bare: the poller's own Metadata request and its
         ListOffsets requests (one per leader and isolation level, the bytes it encoded)
         through a kafka-python connection with their answers left undecoded, list groups
         and the groups' offsets batched per coordinator (kafka-python's
         list_group_offsets: FindCoordinator v4 + OffsetFetch v8), and the open transactions
         listed by every broker (kafka-python's list_transactions, the states the poller asks
         for), and
  poll:  ClusterPoller.poll_once() and its render (the same requests plus decoding,
         derivations, snapshot and sample lines, as the worker does each poll)
in the same run, alternating, and prints medians, the ratio and the poll's CPU (this
process, all threads) per partition.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import time

from bench_scrape import broker_for, commit_groups  # bench/ is on sys.path when run as a script
from confluent_kafka.admin import AdminClient, NewTopic

from txnwatch.config import load_config
from txnwatch.exporter.model import OPEN_STATES
from txnwatch.exporter.poll.poller import ClusterPoller
from txnwatch.exporter.poll.render import RenderCache, render_snapshot
from txnwatch.kafka import list_offsets as lo
from txnwatch.kafka import metadata as mdw
from txnwatch.kafka.kafka_python import KafkaPythonTransport
from txnwatch.kafka.wire import RawRequest
from txnwatch.metrics import FamilyWriter


def snap_leaders(io, cfg):
    """The selected topics' leaders, as the poller's last metadata saw them."""
    md = io.metadata(cfg.topics)
    return md.leaders


def setup(bootstrap: str, topics: int, partitions: int, groups: int) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    per = max(partitions // topics, 1)
    names = [f"bench-{i:04d}" for i in range(topics)]
    for i in range(0, len(names), 50):
        for f in admin.create_topics([NewTopic(n, per, 1) for n in names[i:i + 50]],
                                     operation_timeout=300, request_timeout=300).values():
            f.result()
    commit_groups(bootstrap, names, groups, "bench")   # 20 partitions each
    return names


def floor_cycle(admin: AdminClient, transport, requests, version: int, timeout: float, group_admin,
                md_version: int) -> float:
    """The poll's requests, bare (see the module docstring); wall seconds."""
    t0 = time.perf_counter()
    md = transport.send([(None, RawRequest("MetadataRequest", mdw.API_KEY, md_version, True,
                                           mdw.encode_request(md_version), lambda v, b: b))],
                        time.monotonic() + timeout, what="Metadata")
    flexible = version >= lo.FLEXIBLE_FROM
    transport.send([(r.leader, RawRequest("ListOffsetsRequest", lo.API_KEY, version, flexible, body,
                                          lambda v, b: b)) for r in requests for body in r.bodies],
                   time.monotonic() + timeout, what="ListOffsets")
    groups = admin.list_consumer_groups(request_timeout=timeout).result().valid
    group_admin.list_group_offsets({g.group_id: None for g in groups})
    group_admin.list_transactions(state_filters=sorted(OPEN_STATES))
    del md
    return time.perf_counter() - t0


def compare(bootstrap: str, rounds: int, topics=None, groups=None, profile: bool = False) -> dict:
    """The poll (with its render) against its requests sent bare, alternating `rounds` times;
    `topics`/`groups` select what the poller reads (config filters; None: everything)."""
    cluster = {"bootstrap_servers": bootstrap, "poll_timeout": 60}
    if topics:
        cluster["topics"] = {"include": [topics]}
    if groups:
        cluster["groups"] = {"include": [groups]}
    cfg = load_config(cluster, env={}).clusters[0]
    poller = ClusterPoller(cfg)
    cache = RenderCache()

    def poll():
        snap = poller.poll_once()
        w = FamilyWriter()
        render_snapshot(w, snap, cfg.granularity, cfg.max_transactional_id_series, cache=cache)
        w.chunks()
        return snap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    snap = poll()          # warm-up: connections, capability probe, DescribeConfigs
    io = poller.io
    version = io.list_offsets_path.version
    requests, _ = lo.RequestCache().plan(version, dict(snap_leaders(io, cfg)), None, 60_000)
    from kafka.admin import KafkaAdminClient
    group_admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    transport = KafkaPythonTransport({"bootstrap.servers": bootstrap}, 60)
    floor_cycle(admin, transport, requests, version, 60, group_admin, io.metadata_path.version)
    polls, floors, cpus = [], [], []
    for _ in range(rounds):
        floors.append(floor_cycle(admin, transport, requests, version, 60, group_admin, io.metadata_path.version))
        t, c = time.perf_counter(), time.process_time()
        snap = poll()
        polls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    out = {"partitions": len(snap.partitions), "group_rows": len(snap.groups), "version": version,
           "requests": len(requests) * 2, "floors": floors, "polls": polls, "cpus": cpus,
           "floor": statistics.median(floors), "poll": statistics.median(polls), "cpu": statistics.median(cpus)}
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(poll)
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    transport.close()
    group_admin.close()
    poller.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="then profile one poll (cProfile, own time)")
    ap.add_argument("--bootstrap", default=None,
                    help="a cluster set up before (e.g. bench_scrape's), left running; no setup")
    ap.add_argument("--topics-regex", default=None, help="with --bootstrap: the topics polled")
    ap.add_argument("--groups-regex", default=None, help="with --bootstrap: the groups polled")
    a = ap.parse_args()
    if a.bootstrap:
        report(compare(a.bootstrap, a.rounds, a.topics_regex, a.groups_regex, profile=a.profile))
        return
    with broker_for(a.partitions) as broker:
        t0 = time.perf_counter()
        setup(broker.bootstrap, a.topics, a.partitions, a.groups)
        print(f"setup: {a.topics} topics / {a.partitions} partitions / {a.groups} groups in "
              f"{time.perf_counter() - t0:.1f}s")
        report(compare(broker.bootstrap, a.rounds, profile=a.profile))


def report(r: dict) -> None:
    """The comparison's medians, ratio and CPU per partition."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"partitions polled: {r['partitions']}, group-partitions: {r['group_rows']}, "
          f"ListOffsets v{r['version']} in {r['requests']} requests")
    print(f"floor (the same requests, bare) median: {r['floor'] * 1000:.0f} ms  "
          f"(all: {[round(x * 1000) for x in r['floors']]})")
    print(f"txnwatch poll + render   median: {r['poll'] * 1000:.0f} ms  "
          f"(all: {[round(x * 1000) for x in r['polls']]})")
    print(f"ratio poll/floor: {r['poll'] / r['floor']:.2f}x")
    print(f"poll CPU (all threads of this process) median: {r['cpu'] * 1000:.0f} ms, "
          f"{r['cpu'] / r['partitions'] * 1e6:.1f} us per partition (all: {[round(x * 1000) for x in r['cpus']]})")
    print(f"bench process max RSS: {rss:.0f} MB; machine: {platform.machine()}, "
          f"{platform.processor() or 'cpu'}, python {platform.python_version()}")


if __name__ == "__main__":
    main()
