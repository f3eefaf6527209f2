"""What a poll costs and how fresh the scraped data is, before and after, beside KMinion and
kafka_exporter and a control, in one run on one broker (cluster) per size.

    .venv/bin/python bench/bench_poll_cost.py --sizes 1000,10000,100000 --scrape-every 5,30 \\
        --before ../before [--peers kminion=PATH,kafka_exporter=PATH --peer-sizes 10000]

For each size: a broker (one node up to 15,000 partitions, else a KRaft cluster: see
bench_scrape.broker_for), the partitions (100 per topic) and --groups consumer groups with
20 committed partitions each. First this checkout's poll against the same requests sent
bare (bench_poll.compare, --floor-rounds rounds). Then --txn-producers transactional
producers start, committing every 0.2 s, and for each cadence the subjects run side by side
(--one-at-a-time: in turn, on the same broker and producers), each scraped by its own
Prometheus-like scraper (a fixed cadence, Prometheus's user agent, Accept and
X-Prometheus-Scrape-Timeout-Seconds headers), the scrapers' phases spread over the period so
no two scrapes coincide:

  after   this checkout's `txnwatch serve` (worker processes, poll_schedule scrapes)
  before  the same from the --before checkout (e.g. `git worktree add ../before 950b61a`)
  peers   (--peer-sizes, at the first cadence) KMinion and kafka_exporter binaries
  neighbour  (--neighbour) a txnwatch checkout beside each of them, a noisy neighbour on the CPUs
  shards  (--shards 1,2,4) in place of `after`: for each N in turn, N replicas of this checkout
          (`--shard i --total-shards N`) side by side, with a table of what each shard costs

After each scraper's first --warm scrapes (txnwatch learns the cadence from them), over
--scrapes more: the scrape latency (the whole body read, p50/p99/max; a p99 needs 100 scrapes
or more: of fewer, it is the slowest one), txnwatch's data age in
each scrape (txnwatch_data_age_seconds{source="poller"}: median, p90), its polls
(txnwatch_polls_total), and each subject's CPU (user + system of its processes, /proc) as a
share of one core, with txnwatch's worker CPU per poll and per partition. For the three
slowest scrapes of each subject: who ran on the CPUs meanwhile and who waited for one (each
process group's schedstat: its serving process, its workers, the broker, the producers, the
other subjects, and the scraper's own), and for txnwatch the data age and poll duration the
scrape saw. --cgroups: each service in a CPU cgroup of its own, of equal weight, as a
container runtime or systemd puts them (cpu_groups.py; needs root). --control: also a
static server sending the neighbour's document and doing nothing else (static_server.py),
scraped the same way beside the same neighbour: the scrape latency the machine gives a
server with no work of its own. --trace-slow MS: the kernel's scheduler events
(sched_trace.py; tracefs, root) around each of a subject's scrapes slower than MS: who ran
on each CPU while its serving threads or its scraper waited for one.

Side by side, for every subject alike: a marker producer writes a record every 0.25 s to a
one-partition topic `<prefix>-marker`; each scrape's end and the marker's high watermark it
shows give, per record, the delay from its ack to the first scrape showing it (median, p90,
max: the data age at scrape of an exporter that polls and of one that fetches on scrape
alike), with each subject's CPU, mean RSS (all its processes), series (sample lines) and
scrape p50/p99 as a ratio to the control's (--control: static_server.py sending the last
txnwatch subject's document). Run by hand; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import math
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from bench_freshness import cpu_seconds, own_series, transactions
from bench_poll import compare  # bench/ is on sys.path as a script
from bench_scrape import broker_for, commit_groups, create_partitions
from confluent_kafka import Producer
from cpu_groups import CpuGroups
from sched_trace import SchedTrace, analyse, describe

from txnwatch_dev.net import free_port, wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.procs import start_until_ready
from txnwatch_dev.transactions.workload import create_topics

HEADERS = {"User-Agent": "Prometheus/3.16.0", "Accept-Encoding": "gzip",
           "Accept": "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"}


@dataclass
class Subject:
    name: str
    pid: int
    url: str
    stop: callable
    txnwatch: bool = True
    latencies: list[float] = field(default_factory=list)
    at: list[float] = field(default_factory=list)     # each measured scrape's start, seconds after t0
    # each measured scrape's where_the_time_went() differences
    waits: list[dict[str, tuple[float, float]]] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)   # --trace-slow: the kernel's account of each slow scrape
    ages: list[float] = field(default_factory=list)
    took: list[float] = field(default_factory=list)    # the poll duration each scrape reported
    stolen: list[float] = field(default_factory=list)  # the VM's CPU stolen during each scrape
    polls: tuple[float, float] = (0.0, 0.0)
    cpu: tuple[dict, dict] = ({}, {})
    wall: float = 0.0
    shown: list[tuple[float, float]] = field(default_factory=list)   # (scrape done, monotonic; marker HWM)
    rss: list[float] = field(default_factory=list)     # bytes, all its processes, after each measured scrape
    polled: list[float] = field(default_factory=list)  # txnwatch_polls_total in each measured scrape
    wall_at: list[float] = field(default_factory=list)  # when each measured scrape was sent (wall clock)
    waited: list[tuple[float, float]] = field(default_factory=list)  # scrape waits served / timed out, so far
    series: int = 0                                    # sample lines of its last measured scrape


# The marker topic's high watermark, summed over its series, in each subject's exposition: the
# same fact under three names (txnwatch's granularity may fold the partition into __other__).
MARKER_HWM = {"txnwatch": (b"kafka_partition_high_watermark", b"topic"),
              "kminion": (b"kminion_kafka_topic_partition_high_water_mark", b"topic_name"),
              "kafka_exporter": (b"kafka_topic_partition_current_offset", b"topic")}


def marker_hwm(body: bytes, kind: str, topic: str) -> float | None:
    family, label = MARKER_HWM[kind]
    found = re.findall(rb"^" + family + rb"\{[^}]*" + label + rb'="' + re.escape(topic.encode()) + rb'"[^}]*\} (\S+)',
                       body, re.M)
    return sum(float(v) for v in found) if found else None


def rss_bytes(pids) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def sample_lines(body: bytes) -> int:
    return sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))


class Marker:
    """One record every `every` s to a one-partition topic, each acknowledged offset with the
    monotonic time of its ack: the delay from a record's ack to the first scrape of each
    subject whose high watermark includes it is that subject's data age, measured the same
    way for exporters that poll and those that fetch on scrape."""

    def __init__(self, bootstrap: str, topic: str, every: float = 0.25) -> None:
        self.topic, self.every = topic, every
        self.acks: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Marker:
        self._thread.start()
        return self

    def _acked(self, err, msg) -> None:
        if err is None:
            self.acks.append((msg.offset(), time.monotonic()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._producer.produce(self.topic, value=b"m", partition=0, on_delivery=self._acked)
            self._producer.flush(10)
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def delays(acks: list[tuple[int, float]], shown: list[tuple[float, float]], every: float) -> list[float]:
    """For each record acked while the scrapes were measured (and a period before their end),
    the time from its ack to the end of the first scrape whose high watermark includes it."""
    if not shown:
        return []
    first, last = shown[0][0], shown[-1][0]
    out = []
    for offset, at in acks:
        if first <= at <= last - every:
            done = next((d for d, hwm in shown if hwm > offset), None)
            if done is not None:
                out.append(max(0.0, done - at))
    return out


def txnwatch(name: str, bootstrap: str, prefix: str, cwd: str | None, args: tuple[str, ...] = (),
             log_dir: str | None = None) -> Subject:
    """`log_dir`: its log there as <name>.log, at DEBUG (the poll schedule's decisions)."""
    cluster = {"name": "bench", "bootstrap_servers": bootstrap, "poll_timeout_seconds": 60,
               "topics": {"include": [f"{prefix}-.*"]}, "groups": {"include": [f"{prefix}-group-.*"]},
               "poll_schedule": "scrapes", "poll_interval_seconds": 1}
    logs = dict(log_path=Path(log_dir, f"{name.replace('/', '-')}.log"), extra_args=[*args, "--log-level", "DEBUG"]) \
        if log_dir else dict(extra_args=list(args))
    exp = ExporterProcess({"clusters": [cluster]}, cwd=cwd, **logs).start(timeout=60)
    exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, 600, what=f"{name}: first poll")
    return Subject(name, exp.proc.pid, exp.url + "/metrics", exp.stop)


def peer(name: str, binary: str, bootstrap: str, prefix: str, start_seconds: float = 600) -> Subject:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    if name == "kminion":
        # its defaults (adminApi group offsets, log dirs), the same topics and groups as txnwatch
        config = {"kafka": {"brokers": bootstrap.split(","), "clientId": "kminion"},
                  "minion": {"consumerGroups": {"enabled": True, "scrapeMode": "adminApi", "granularity": "partition",
                                                "allowedGroups": [f"/{prefix}-group-.*/"]},
                             "topics": {"enabled": True, "granularity": "partition",
                                        "allowedTopics": [f"/{prefix}-.*/"]},
                             "logDirs": {"enabled": True}, "endToEnd": {"enabled": False}},
                  "exporter": {"namespace": "kminion", "host": "127.0.0.1", "port": port}}
        (workdir / "kminion.yaml").write_text(yaml.safe_dump(config))
        env = {**os.environ, "CONFIG_FILEPATH": str(workdir / "kminion.yaml")}
        cmd = [binary]
    else:
        env = dict(os.environ)
        cmd = [binary, f"--kafka.server={bootstrap.split(',')[0]}", f"--web.listen-address=127.0.0.1:{port}",
               "--kafka.version=3.9.0", f"--topic.filter={prefix}-.*", f"--group.filter={prefix}-group-.*"]
    log = open(workdir / "out.log", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/metrics"

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited {proc.returncode}: see {log.name}")
        try:
            with urllib.request.urlopen(url, timeout=120) as r:
                return r.status == 200 and b"partition" in r.read()
        except OSError:
            return False
    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    try:
        wait_for(ready, start_seconds, interval=1, what=f"{name} serving partition series")
    except BaseException:
        stop()
        raise
    return Subject(name, proc.pid, url, stop, txnwatch=False)


def kind_of(s: Subject) -> str | None:
    """Which exposition a subject serves (MARKER_HWM), None for the control."""
    return "txnwatch" if s.txnwatch else (s.name if s.name in MARKER_HWM else None)


def control(neighbour: Subject) -> Subject:
    """static_server.py sending the neighbour's gzipped exposition (the same size of
    document) on every scrape: the scrape latency this machine gives a server with no work of
    its own, beside the same neighbour."""
    req = urllib.request.Request(neighbour.url, headers={**HEADERS, "X-Prometheus-Scrape-Timeout-Seconds": "5"})
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    if r.headers.get("Content-Encoding") != "gzip":
        body = gzip.compress(body)
    workdir = Path(tempfile.mkdtemp(prefix="bench-control-"))
    (workdir / "metrics.gz").write_bytes(body)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = start_until_ready([sys.executable, str(Path(__file__).with_name("static_server.py")),
                              str(workdir / "metrics.gz"), str(port)], workdir / "out.log", url, "the control", 60)

    def stop() -> None:
        proc.terminate()
        proc.wait(10)
    return Subject("control", proc.pid, url, stop, txnwatch=False)


def sched(pid: int) -> tuple[float, float]:
    """Seconds the threads of `pid` alive now have run on a CPU, and have spent runnable but
    waiting for one (the first two fields of /proc/<pid>/task/<tid>/schedstat)."""
    ran = waited = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
            ran, waited = ran + int(fields[0]), waited + int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    return ran / 1e9, waited / 1e9


def steal() -> float:
    """CPU seconds the hypervisor gave other guests while this VM had work (/proc/stat)."""
    return int(Path("/proc/stat").read_text().split("\n", 1)[0].split()[8]) / os.sysconf("SC_CLK_TCK")


def where_the_time_went(groups: dict[str, list[int]]) -> dict[str, tuple[float, float]]:
    """Each group of processes' CPU run and wait (sched): taken before and after a scrape,
    their differences say who had the CPUs while it waited."""
    out = {}
    for name, pids in groups.items():
        got = [sched(p) for p in pids]
        out[name] = (sum(g[0] for g in got), sum(g[1] for g in got))
    return out


def tids(pids: list[int]) -> list[int]:
    out = []
    for p in pids:
        try:
            out += [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except OSError:
            continue
    return out


LEAD_IN = 0.3   # seconds of scheduler events kept before a traced scrape: who was waiting already


def traced(trace: tuple[str, float, str], t0: float, t1: float, groups: dict[str, list[int]], k: int) -> str:
    """The kernel's account of the scrape in [t0, t1] (sched_trace): who ran while the serving
    process's threads or the scraper's waited for a CPU. Kept in the trace dir."""
    name, _, keep = trace
    lines = SchedTrace.attach(name).window(t0 - LEAD_IN, t1)
    names = {t: g for g, pids in groups.items() for t in tids(pids)} | {t: "scraper" for t in tids([os.getpid()])}
    watch = set(tids(groups["serving"])) | {t for t, g in names.items() if g == "scraper"}
    summary = describe(analyse(lines, names, watch, t0, t1))
    Path(keep, f"scrape-{k}.txt").write_text(summary + "\n" + "\n".join(lines) + "\n")
    return summary


def scrape_loop(url: str, pid: int, own: bool, every: float, phase: float, warm: int, measured: int,
                t0: float, out, others: dict[str, list[int]] | None = None, cgroup: str | None = None,
                trace: tuple[str, float, str] | None = None, marker: tuple[str, str] | None = None) -> None:
    """One Prometheus-like scraper at t0 + phase + k * every: the first `warm` scrapes learn
    nothing but the cadence, the next `measured` periods are measured. A scrape that outlasts
    its period (a peer fetching on scrape) makes the scraper skip the slots it missed, as
    Prometheus does; the window ends on time whatever the subject does.

    Runs in its own process (`phase`): a scraper sharing an interpreter with the others,
    and with the bench's producers, waited for their GIL (parsing a peer's 10 MB body) and
    counted that as the subject's latency. Sends its measurements to `out`. `others`: process
    groups (name: pids) whose CPU each measured scrape also records (where_the_time_went);
    the scraper's own run and wait are read apart, just around the request, since its wait
    for a CPU is in the latency it measures. `cgroup`: the cgroup.procs of the scrapers' CPU
    group (--cgroups), joined first. `trace` (--trace-slow): the tracefs instance, the latency
    in seconds over which a scrape is traced, and the directory the traces go to. `marker`
    (the subject's exposition kind, the marker topic): each measured scrape's end and the
    marker's high watermark it showed, with the subject's RSS after it."""
    if cgroup:
        Path(cgroup).write_text(str(os.getpid()))
    timeout = min(every, 10)
    start_at, end_at = t0 + phase + warm * every, t0 + phase + (warm + measured) * every
    r_lat, r_at, r_ages, r_took, r_stolen, r_waits, r_traces = [], [], [], [], [], [], []
    r_shown, r_rss, r_polled, r_wall, r_waited, series = [], [], [], [], [], 0
    polls, cpu0, wall = (0.0, 0.0), {}, 0.0
    groups: dict[str, list[int]] = {}
    k = 0
    while True:
        slot = t0 + phase + k * every
        if slot >= end_at:
            break
        time.sleep(max(0.0, slot - time.monotonic()))
        if slot >= start_at and not cpu0:
            cpu0, wall = cpu_seconds(pid), time.monotonic()
            groups = {"serving": [pid], "workers": [p for p in cpu0 if p != pid],
                      **(others or {})}
        req = urllib.request.Request(url, headers={**HEADERS, "X-Prometheus-Scrape-Timeout-Seconds": f"{timeout:g}"})
        waits0, stolen0 = where_the_time_went(groups), steal()
        own0 = sched(os.getpid())    # the scraper's own, tight around the scrape (no /proc walk in it)
        mono0, began, wall_began = time.monotonic(), time.perf_counter(), time.time()
        with urllib.request.urlopen(req, timeout=300) as r:
            body = r.read()
            gzipped = r.headers.get("Content-Encoding") == "gzip"
        took, mono1 = time.perf_counter() - began, time.monotonic()
        own1 = sched(os.getpid())
        waits, stolen = where_the_time_went(groups), steal()
        text = gzip.decompress(body) if gzipped else body
        m = own_series(text.decode()) if own else None
        if slot >= start_at:
            if marker is not None:
                hwm = marker_hwm(text, *marker)
                if hwm is not None:
                    r_shown.append((mono1, hwm))
            r_rss.append(rss_bytes(groups["serving"] + groups["workers"]))
            series = sample_lines(text)
            r_lat.append(took)
            r_at.append(began - t0)
            r_wall.append(wall_began)
            r_waits.append({**{k: (waits[k][0] - v[0], waits[k][1] - v[1]) for k, v in waits0.items()},
                            "scraper": (own1[0] - own0[0], own1[1] - own0[1])})
            r_stolen.append(stolen - stolen0)
            r_traces.append(traced(trace, mono0, mono1, groups, len(r_lat)) if trace and took > trace[1] else "")
            if m is not None:
                r_ages.append(m.get_value("txnwatch_data_age_seconds", source="poller"))
                r_took.append(m.get_value("txnwatch_poll_duration_seconds", source="poller"))
                r_polled.append(m.get_value("txnwatch_polls_total"))
                r_waited.append((m.get_value("txnwatch_scrape_waits_total", outcome="served") or 0.0,
                                 m.get_value("txnwatch_scrape_waits_total", outcome="timed_out") or 0.0))
                polls = (polls[0], m.get_value("txnwatch_polls_total"))
        elif m is not None:
            polls = (m.get_value("txnwatch_polls_total"), 0.0)
        if trace:
            SchedTrace.attach(trace[0]).clear()   # the next scrape's window: seconds of events to read
        k = max(k + 1, math.ceil((time.monotonic() - t0 - phase) / every))
    time.sleep(max(0.0, end_at - time.monotonic()))
    out.send({"latencies": r_lat, "at": r_at, "waits": r_waits, "traces": r_traces, "ages": r_ages, "took": r_took,
              "polled": r_polled, "wall_at": r_wall, "waited": r_waited,
              "stolen": r_stolen, "polls": polls, "shown": r_shown, "rss": r_rss, "series": series,
              "cpu": (cpu0, cpu_seconds(pid)), "wall": time.monotonic() - wall})


# a subject whose every scrape outlasted the run (kafka_exporter at 100,000 partitions)
NO_SCRAPE = "no scrape finished in the run"


def pct(xs: list[float], p: float) -> float:
    """The nearest-rank percentile: of fewer than 100 scrapes, p99 is the slowest one."""
    xs = sorted(xs)
    return xs[min(math.ceil(len(xs) * p) - 1, len(xs) - 1)]


def report(size: int, every: float, s: Subject) -> str:
    before, after = s.cpu
    total = sum(after.values()) - sum(before.values())
    cpu = f"**{total / s.wall * 100:.1f} %**"
    lat = (f"{statistics.median(s.latencies) * 1000:.0f} / {pct(s.latencies, 0.99) * 1000:.0f} / "
           f"{max(s.latencies) * 1000:.0f} ms" if s.latencies else NO_SCRAPE)
    if not s.txnwatch:
        how = "static bytes" if s.name == "control" else "fetch on scrape"
        return f"| {size:,} | {every:g} s | {s.name} | {len(s.latencies)} | {lat} | {how} | | | {cpu} | | |"
    polls = s.polls[1] - s.polls[0]
    worker = sum(v - before.get(p, 0.0) for p, v in after.items() if p != s.pid)
    per_poll = worker / max(polls, 1)
    return (f"| {size:,} | {every:g} s | {s.name} | {len(s.latencies)} | {lat} | **{statistics.median(s.ages):.2f} s** | "
            f"{pct(s.ages, 0.9):.2f} s | {polls:g} | {cpu} | {per_poll * 1000:.0f} ms | "
            f"{per_poll / size * 1e6:.1f} us |")


def side_by_side(size: int, every: float, subjects: list[Subject], marker: Marker) -> str:
    """The subjects in one table: the delay from a marker record's ack to the first scrape
    showing it (median, p90, max), CPU, mean RSS, series, and scrape p50/p99 against the
    control's (when it ran)."""
    ctl = next((s for s in subjects if s.name == "control"), None)
    rows = [f"\n<!-- side by side, {size:,} partitions, scraped every {every:g} s -->",
            "| subject | delay from ack to scrape: median / p90 / max | CPU (share of a core) | RSS, mean | series "
            "| scrape p50 / p99 | against the control's |", "|---|---|---|---|---|---|---|"]
    for s in subjects:
        d = delays(marker.acks, s.shown, every)
        delay = (f"{statistics.median(d):.2f} / {pct(d, 0.9):.2f} / {max(d):.2f} s ({len(d)} records)" if d
                 else ("" if s.name == "control" else "never shown"))
        before, after = s.cpu
        cpu = (sum(after.values()) - sum(before.values())) / s.wall * 100
        latency, ratio = NO_SCRAPE, ""
        if s.latencies:
            p50, p99 = statistics.median(s.latencies), pct(s.latencies, 0.99)
            latency = f"{p50 * 1000:.0f} / {p99 * 1000:.0f} ms"
            if ctl is not None and s is not ctl and ctl.latencies:
                ratio = f"{p50 / statistics.median(ctl.latencies):.2f}x / {p99 / pct(ctl.latencies, 0.99):.2f}x"
        rss = f"{statistics.mean(s.rss) / 2**20:.0f} MiB" if s.rss else ""
        rows.append(f"| {s.name} | {delay} | {cpu:.1f} % | {rss} | {s.series:,} | {latency} | {ratio} |")
    return "\n".join(rows)


def phase(size: int, every: float, subjects: list[Subject], warm: int, measured: int,
          broker_pids: list[int], cgroups: CpuGroups | None = None,
          trace: tuple[str, float, str] | None = None, marker: Marker | None = None) -> None:
    ctx = multiprocessing.get_context("spawn")   # the bench's producer threads stay out of them
    t0 = time.monotonic() + 5                    # CLOCK_MONOTONIC: one clock for every process
    runs = []
    for i, s in enumerate(subjects):
        recv, send = ctx.Pipe(duplex=False)
        # who else may hold the CPUs during its scrapes: the broker, the bench's producers,
        # the other subjects (all their processes)
        others = {"broker": broker_pids, "producers": [os.getpid()],
                  **{o.name: list(cpu_seconds(o.pid)) for o in subjects if o is not s}}
        proc = ctx.Process(target=scrape_loop, args=(s.url, s.pid, s.txnwatch, every, i * every / len(subjects),
                                                      warm, measured, t0, send, others,
                                                      cgroups and str(cgroups.path("scrapers")),
                                                      trace and i == 0 and (trace[0], trace[1],
                                                                            mkdir(Path(trace[2], f"{size}-{every:g}-{s.name}"))),
                                                      marker and kind_of(s) and (kind_of(s), marker.topic)),
                                    daemon=True)
        proc.start()
        runs.append((s, proc, recv))
    for s, proc, recv in runs:
        got = recv.recv()
        proc.join()
        for name in ("latencies", "at", "waits", "traces", "ages", "took", "stolen", "polls", "cpu", "wall",
                     "shown", "rss", "series", "polled", "wall_at", "waited"):
            setattr(s, name, got[name])
    for s in subjects:
        print(report(size, every, s), flush=True)
    if marker is not None:
        print(side_by_side(size, every, subjects, marker), flush=True)
    for s, _, _ in runs:
        if s.txnwatch:     # how the schedule held: polls that were not served by the scrape they were timed for
            # (the length of a poll that missed its scrape shows in no scrape: the next scrape
            # serves the poll after it; --log-dir has it)
            late = [i for i, a in enumerate(s.ages) if a > every / 2]
            waited = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(s.waited)]
            print(f"<!-- {s.name}: polls took {statistics.median(s.took) * 1000:.0f} ms median, p90 "
                  f"{pct(s.took, 0.9) * 1000:.0f} ms, max {max(s.took) * 1000:.0f} ms; {len(late)} of {len(s.ages)} "
                  "scrapes found the poll timed for them not yet served"
                  + "".join(f"; scrape {i} (sent at {s.wall_at[i]:.3f}, wall clock): data age {s.ages[i]:.2f} s, "
                            f"polls so far {s.polled[i]:g}" for i in late)
                  + f"; {sum(1 for w in waited if w[0])} scrapes waited for a late poll and got its data"
                  + "".join(f" (scrape {i + 1}: {s.latencies[i + 1] * 1000:.0f} ms)" for i, w in enumerate(waited) if w[0])
                  + f", {sum(1 for w in waited if w[1])} waited their budget out -->", flush=True)
    for s, _, _ in runs:   # where to look in a trace of the subject (lab: time.monotonic() - t0)
        seen = [f"; data age {a:.2f} s, last poll {t:.2f} s" for a, t in zip(s.ages, s.took, strict=True)]
        slow = sorted(zip(s.latencies, s.at, s.waits, s.stolen, seen or [""] * len(s.at), s.traces, strict=True),
                      reverse=True)[:3]
        print(f"<!-- {s.name}: slowest scrapes " + ", ".join(
            f"{d * 1000:.0f} ms at t0+{at:.2f} s (CPU ran / waited for, ms: "
            + "; ".join(f"{k} {r * 1000:.0f} / {q * 1000:.0f}" for k, (r, q) in w.items())
            + f"; stolen {st * 1000:.0f}{note})" + (f" [trace: {tr}]" if tr else "") for d, at, w, st, note, tr in slow)
            + f" (t0 = monotonic {t0:.3f}) -->", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--scrape-every", default="5,30")
    ap.add_argument("--before", default=None, help="a checkout of the code before (its `txnwatch serve` runs beside)")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="measure after and before in turn on the same broker and producers, not side by side")
    ap.add_argument("--neighbour", default=None,
                    help="a txnwatch checkout run (and scraped) beside each subject, as a noisy neighbour on the CPUs")
    ap.add_argument("--cgroups", action="store_true",
                    help="each service in a CPU cgroup of its own, of equal weight, as containers or systemd "
                         "units are (the broker, the producers, each subject, the scrapers); needs root")
    ap.add_argument("--control", action="store_true",
                    help="also measure static_server.py sending the last txnwatch subject's document (the "
                         "--neighbour's when given): the scrape latency of a server that does nothing else")
    ap.add_argument("--trace-slow", type=float, default=None, metavar="MS",
                    help="trace the scheduler (tracefs, sched_trace.py; needs root) and, for each of the first "
                         "subject's scrapes slower than MS, say who ran on the CPUs while its serving threads or "
                         "its scraper waited")
    ap.add_argument("--trace-dir", default=None,
                    help="where --trace-slow keeps each slow scrape's events (default: a new temporary directory)")
    ap.add_argument("--log-dir", default=None,
                    help="keep each txnwatch subject's log there, at DEBUG (when each poll was due and started, "
                         "when its data was served)")
    ap.add_argument("--peers", default="", help="name=binary,... (kminion, kafka_exporter)")
    ap.add_argument("--peer-sizes", default="10000", help="sizes at which the peers run (first cadence)")
    ap.add_argument("--peer-start-seconds", type=float, default=600,
                    help="how long a peer may take to serve its first partition series before it is left out")
    ap.add_argument("--shards", default="",
                    help="shard counts (1,2,4): in place of `after`, N replicas of this checkout side by side, "
                         "for each N in turn")
    ap.add_argument("--bootstrap", default=None,
                    help="measure against this cluster, already set up with --prefix (one size), not a new one")
    ap.add_argument("--prefix", default=None, help="with --bootstrap: its topics' and groups' prefix")
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--txn-producers", type=int, default=20)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--scrapes", default="12,4", help="scrapes measured per cadence (as --scrape-every)")
    ap.add_argument("--floor-rounds", type=int, default=3,
                    help="per size, first: this checkout's poll against its requests sent bare (bench_poll)")
    a = ap.parse_args()
    floors: list[str] = []
    cadences = [float(x) for x in a.scrape_every.split(",")]
    measured = [int(x) for x in a.scrapes.split(",")]
    peers = dict(p.split("=", 1) for p in a.peers.split(",") if p)
    cgroups = CpuGroups() if a.cgroups else None
    tracer = SchedTrace(f"txnwatch-bench-{os.getpid()}") if a.trace_slow is not None else None
    if tracer is not None and a.trace_dir is None:
        a.trace_dir = tempfile.mkdtemp(prefix="txnwatch-bench-traces-")
    try:
        run(a, cadences, measured, peers, floors, cgroups,
            tracer and (tracer.dir.name, a.trace_slow / 1000, a.trace_dir))
    finally:
        if cgroups is not None:
            cgroups.close()
        if tracer is not None:
            tracer.close()


class Existing:
    """--bootstrap: a cluster set up before (bench_scrape.create_partitions and commit_groups
    with --prefix, --sizes partitions), left running afterwards."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __enter__(self) -> Existing:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def describe(self) -> str:
        return f"the cluster at {self.bootstrap}"


def subject_groups(a) -> list[list[tuple[str, str | None, tuple[str, ...]]]]:
    """The subjects run together, group after group: (name, checkout, serve's extra arguments).
    Side by side, or each in turn (--one-at-a-time), beside the --neighbour if any; with
    --shards, one group per shard count: its replicas side by side."""
    ctl = [("control", None, ())] if a.control else []
    nb = [("neighbour", a.neighbour, ())] if a.neighbour else []
    if a.shards:
        return [[(f"shard {i}/{n}", None, ("--shard", str(i), "--total-shards", str(n))) for i in range(n)] + ctl + nb
                for n in (int(x) for x in a.shards.split(","))]
    names = [("after", None, ())] + ([("before", a.before, ())] if a.before else []) + ctl
    return [[n] + nb for n in names] if a.one_at_a_time else [names + nb]


def shard_row(size: int, every: float, shards: list[Subject]) -> str:
    """What each of N replicas cost while they ran side by side: CPU and RSS (mean and the
    most loaded shard), the data age of all their scrapes, series and worker CPU per poll."""
    cpus, rss, per_poll = [], [], []
    for s in shards:
        before, after = s.cpu
        cpus.append((sum(after.values()) - sum(before.values())) / s.wall * 100)
        rss.append(statistics.mean(s.rss) / 2**20)
        worker = sum(v - before.get(p, 0.0) for p, v in after.items() if p != s.pid)
        per_poll.append(worker / max(s.polls[1] - s.polls[0], 1))
    ages = [x for s in shards for x in s.ages]
    return (f"| {size:,} | {every:g} s | {len(shards)} | {statistics.mean(cpus):.1f} / {max(cpus):.1f} % | "
            f"{statistics.mean(rss):.0f} / {max(rss):.0f} MiB | {statistics.median(ages):.2f} / {pct(ages, 0.9):.2f} s | "
            f"{statistics.mean(s.series for s in shards):,.0f} | {statistics.mean(per_poll) * 1000:.0f} ms |")


def mkdir(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def run(a, cadences: list[float], measured: list[int], peers: dict[str, str], floors: list[str],
        cgroups: CpuGroups | None, trace: tuple[str, float, str] | None) -> None:
    sharded: list[str] = []
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{a.groups} groups, {a.txn_producers} transactional producers"
          + (f"; each service in a CPU cgroup of its own under {cgroups.root}" if cgroups else "")
          + (f"; slow scrapes traced into {a.trace_dir}" if trace else ""))
    print("| partitions | scraped every | subject | scrapes | scrape p50 / p99 / max | data age median | p90 | polls "
          "| CPU (share of a core) | worker CPU per poll | per partition |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for size in [int(x) for x in a.sizes.split(",")]:
        with (Existing(a.bootstrap) if a.bootstrap else broker_for(size)) as broker:
            t = time.monotonic()
            prefix = a.prefix or f"fresh{size}"
            if a.bootstrap:
                topics = [f"{prefix}-{i:05d}" for i in range(max(size // 100, 1))]
            else:
                topics = create_partitions(broker.bootstrap, size, prefix)
                commit_groups(broker.bootstrap, topics, a.groups, prefix)
            print(f"<!-- {size}: set up in {time.monotonic() - t:.0f} s on {broker.describe()} -->", flush=True)
            if a.floor_rounds:
                # before the transactional producers start: the poll then sends what the floor
                # sends (with them, it also describes their open transactions)
                r = compare(broker.bootstrap, a.floor_rounds, f"{prefix}-.*", f"{prefix}-group-.*")
                floors.append(f"| {r['partitions']:,} | {r['group_rows']:,} | v{r['version']}, {r['requests']} | "
                              f"{r['floor'] * 1000:.0f} ms | {r['poll'] * 1000:.0f} ms | "
                              f"**{r['poll'] / r['floor']:.2f}x** | {r['cpu'] * 1000:.0f} ms | "
                              f"**{r['cpu'] / r['partitions'] * 1e6:.1f} us** |")
                print("<!-- poll vs floor: " + floors[-1] + " -->", flush=True)
            broker_pids = [n.pid for n in getattr(broker, "nodes", [broker]) if getattr(n, "pid", None)]
            if cgroups is not None:
                cgroups.join("broker", broker_pids)
                cgroups.join("producers", [os.getpid()])   # the bench: its producer threads
            stop = threading.Event()
            producers = transactions(broker.bootstrap, topics, a.txn_producers, stop)
            create_topics(broker.bootstrap, [f"{prefix}-marker"], partitions=1)
            marker = Marker(broker.bootstrap, f"{prefix}-marker").start()
            try:
                for i, every in enumerate(cadences):
                    for group in subject_groups(a):
                        subjects: list[Subject] = []
                        try:   # each subject stopped even when a later one fails to start
                            for n, cwd, args in group:
                                if n != "control":
                                    subjects.append(txnwatch(n, broker.bootstrap, prefix, cwd, args, a.log_dir))
                            if ("control", None, ()) in group:   # first, as the subject its scraper measures
                                subjects.insert(0, control(subjects[-1]))
                            if i == 0 and str(size) in a.peer_sizes.split(","):
                                for n, b in peers.items():
                                    try:
                                        subjects.append(peer(n, b, broker.bootstrap, prefix, a.peer_start_seconds))
                                    except TimeoutError as exc:   # a peer too slow to serve: said, not fatal
                                        print(f"<!-- {n} at {size:,}: {exc} -->", flush=True)
                            if cgroups is not None:   # a subject's serving process and its workers
                                for s in subjects:
                                    cgroups.join(s.name, cpu_seconds(s.pid))
                            phase(size, every, subjects, a.warm, measured[min(i, len(measured) - 1)],
                                  broker_pids, cgroups, trace, marker)
                            if a.shards:
                                sharded.append(shard_row(size, every, [s for s in subjects if s.name.startswith("shard")]))
                                print(f"<!-- {sharded[-1]} -->", flush=True)
                        finally:
                            for s in subjects:
                                s.stop()
            finally:
                stop.set()
                marker.stop()
                for p in producers:
                    p.join(30)
    if sharded:
        print("\n| partitions | scraped every | shards | CPU per shard, mean / max (share of a core) | RSS per shard, "
              "mean / max | data age at scrape, median / p90 | series per shard, mean | worker CPU per poll, mean "
              "|\n|---|---|---|---|---|---|---|---|")
        print("\n".join(sharded))
    if floors:
        print("\n| partitions | group rows | ListOffsets version, requests | floor (median) | poll + render (median) "
              "| ratio | poll CPU (all threads) | per partition |\n|---|---|---|---|---|---|---|---|")
        print("\n".join(floors))


if __name__ == "__main__":
    main()
