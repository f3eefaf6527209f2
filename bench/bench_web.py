"""Scrape latency of the one HTTP server stack (cheroot) plain and with TLS from the web
config, in one run on one broker.

    .venv/bin/python bench/bench_web.py [--partitions 10000] [--groups 500] [--seconds 30]

One broker (Apache Kafka from Maven Central) with the partitions and groups, then for each
of three exporters in turn (`txnwatch serve`, polling every 2 s):
  plain        http, no auth;
  tls          https, server certificate only;
  mtls+basic   https with a client certificate required and a bcrypt basic-auth user
               (cost 10), the fleet setting of docs/configuration.md;
4 scraper processes, each scraping every 0.25 s on its own schedule over a kept-alive
connection (as Prometheus does) with Prometheus's Accept headers (OpenMetrics, gzip):
p50/p99/max. Then the same with a new connection (a full TLS handshake) for every scrape.

    .venv/bin/python bench/bench_web.py --compare ../before [--rounds 10] [--scrapes 300]

What one scrape costs the serving process, side by side: this checkout's exporter (plain
http), the one of another checkout (e.g. `git worktree add ../before HEAD~1`) and a control
(static_server.py sending the same document, doing nothing else), on one broker, each polling
every 5 s in its worker process. In alternating rounds, each subject in turn: an idle window
(the serving process's background CPU, its rate) then --scrapes sequential scrapes, each on a
new connection with Prometheus's headers; the serving process's CPU (its threads' schedstat)
beyond the idle rate, per scrape, and the scrapes' latency. Medians over the rounds.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import ssl
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import bcrypt
import yaml
from bench_poll_cost import Subject, control, sched  # bench/ is on sys.path when run as a script
from bench_scrape import (
    PROMETHEUS_HEADERS,
    in_processes,
    paced,
    pct,
    setup,
)

from txnwatch_dev.kafka import make_broker
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.pki import make_ca

PASSWORD = "bench-scrape-pw"


def _worker(port: int, tls: dict | None, headers: dict, seconds: float, period: float, keep_alive: bool, out) -> None:
    def connect():
        if tls is None:
            return http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        ctx = ssl.create_default_context(cafile=tls["ca"])
        if tls.get("cert"):
            ctx.load_cert_chain(tls["cert"], tls["key"])
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx)

    conn = [connect()]

    def get() -> None:
        if not keep_alive:
            conn[0].close()
            conn[0] = connect()
        conn[0].request("GET", "/metrics", headers=headers)
        resp = conn[0].getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"/metrics answered {resp.status}")

    lat = paced(seconds, period, get)
    conn[0].close()
    out.put(lat)


def scrape(port: int, tls: dict | None, headers: dict, seconds: float, keep_alive: bool) -> list[float]:
    return in_processes(4, _worker, port, tls, headers, seconds, 0.25, keep_alive)


def variants(d: Path) -> list[tuple[str, dict | None, dict | None, dict]]:
    """(name, web config, client TLS settings, extra headers)."""
    ca, clients = make_ca(d, "server-ca"), make_ca(d, "clients-ca")
    server = ca.issue("tls", "localhost", server=True)
    client = clients.issue("prometheus", "prometheus")
    tls = {"cert_file": str(server.cert), "key_file": str(server.key)}
    user = {"prometheus": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()}
    auth = {"Authorization": "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()}
    return [("plain", None, None, {}),
            ("tls", {"tls_server_config": tls}, {"ca": str(ca.cert)}, {}),
            ("mtls+basic", {"tls_server_config": {**tls, "client_auth_type": "RequireAndVerifyClientCert",
                                                  "client_ca_file": str(clients.cert)}, "basic_auth_users": user},
             {"ca": str(ca.cert), "cert": str(client.cert), "key": str(client.key)}, auth)]


def summary(lat: list[float]) -> str:
    return (f"{len(lat)} scrapes, p50 {statistics.median(lat) * 1000:.1f} ms, p99 {pct(lat, 99) * 1000:.1f} ms, "
            f"max {max(lat) * 1000:.1f} ms")


def scrape_cost(url: str, pid: int, scrapes: int, idle: float) -> tuple[float, list[float]]:
    """The serving process's CPU seconds per scrape beyond its idle rate, and the latencies."""
    ran0, t0 = sched(pid)[0], time.monotonic()
    time.sleep(idle)
    ran1, t1 = sched(pid)[0], time.monotonic()
    rate = (ran1 - ran0) / (t1 - t0)
    lat = []
    req = urllib.request.Request(url, headers={**PROMETHEUS_HEADERS, "User-Agent": "Prometheus/3.0.0"})
    for _ in range(scrapes):
        began = time.perf_counter()
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        lat.append(time.perf_counter() - began)
        time.sleep(0.01)
    ran2, t2 = sched(pid)[0], time.monotonic()
    return (ran2 - ran1 - rate * (t2 - t1)) / scrapes, lat


def compare(bootstrap: str, before: str, rounds: int, scrapes: int) -> None:
    cluster = {"name": "bench", "bootstrap_servers": bootstrap, "poll_schedule": "interval",
               "poll_interval_seconds": 5, "poll_timeout_seconds": 60}
    here = str(Path(__file__).resolve().parent.parent)
    exporters: dict[str, ExporterProcess] = {}
    ctl = None
    try:
        for name, cwd in (("after", here), ("before", before)):
            exporters[name] = ExporterProcess({"clusters": [cluster]}, cwd=cwd).start(60)
        for exp in exporters.values():
            exp.wait_metric(lambda m: m.get_value("txnwatch_up") == 1, timeout=300, what="first poll")
        subjects = [Subject(n, e.proc.pid, e.url + "/metrics", e.stop) for n, e in exporters.items()]  # stopped below
        ctl = control(subjects[0])
        subjects.append(ctl)
        cpu: dict[str, list[float]] = {s.name: [] for s in subjects}
        lat: dict[str, list[float]] = {s.name: [] for s in subjects}
        for r in range(rounds):
            turn = r % len(subjects)
            for s in subjects[turn:] + subjects[:turn]:
                per_scrape, took = scrape_cost(s.url, s.pid, scrapes, idle=2.0)
                cpu[s.name].append(per_scrape)
                lat[s.name] += took
        print("| subject | serving CPU per scrape, median of rounds (min, max) | scrape p50 / p99 |")
        print("|---|---|---|")
        for s in subjects:
            c = cpu[s.name]
            print(f"| {s.name} | {statistics.median(c) * 1e3:.3f} ms ({min(c) * 1e3:.3f}, {max(c) * 1e3:.3f}) | "
                  f"{statistics.median(lat[s.name]) * 1e3:.2f} / {pct(lat[s.name], 99) * 1e3:.2f} ms |")
        after, bef = statistics.median(cpu["after"]), statistics.median(cpu["before"])
        print(f"after / before: {after / bef:.2f}x the CPU per scrape; after / control: "
              f"{after / statistics.median(cpu['control']):.2f}x")
    finally:
        if ctl is not None:
            ctl.stop()
        for exp in exporters.values():
            exp.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--compare", metavar="CHECKOUT", help="the scrape's CPU against CHECKOUT's and a control's")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--scrapes", type=int, default=300)
    a = ap.parse_args()
    if a.compare:
        with make_broker() as broker:
            setup(broker.bootstrap, a.partitions, a.groups)
            compare(broker.bootstrap, a.compare, a.rounds, a.scrapes)
        return
    work = Path(tempfile.mkdtemp(prefix="txnwatch-bench-web-"))
    with make_broker() as broker:
        t0 = time.perf_counter()
        setup(broker.bootstrap, a.partitions, a.groups)
        print(f"setup {a.partitions} partitions / {a.groups} groups: {time.perf_counter() - t0:.0f}s")
        for name, web, client, auth in variants(work / "pki"):
            args = []
            if web is not None:
                path = work / f"web-{name}.yml"
                path.write_text(yaml.safe_dump(web))
                args = ["--web.config.file", str(path)]
            ctx = None
            if client is not None:
                ctx = ssl.create_default_context(cafile=client["ca"])
                if client.get("cert"):
                    ctx.load_cert_chain(client["cert"], client["key"])
            exp = ExporterProcess({"clusters": [{"name": "bench", "bootstrap_servers": broker.bootstrap,
                                                 "poll_interval_seconds": 2, "poll_timeout_seconds": 60}]},
                                  extra_args=args, tls_client=ctx, headers=auth).start(60)
            try:
                exp.wait_metric(lambda m: m.get_value("txnwatch_up") == 1, timeout=300, what="first poll")
                headers = {**PROMETHEUS_HEADERS, **auth}
                kept = scrape(exp.port, client, headers, a.seconds, keep_alive=True)
                fresh = scrape(exp.port, client, headers, a.seconds, keep_alive=False)
                print(f"{name:<11} kept-alive connection: {summary(kept)}")
                print(f"{'':<11} new connection per scrape: {summary(fresh)}")
            finally:
                exp.stop()


if __name__ == "__main__":
    main()
