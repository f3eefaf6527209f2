"""Where `txnwatch serve` listens, against real processes: every interface by default (IPv4 and
IPv6 on one dual-stack socket, scraped by a real Prometheus at [::1] and 127.0.0.1), explicit
addresses and the telemetry path, the fallback to IPv4 where the kernel has no IPv6, the
healthcheck following `serve`'s flags, the addresses refused at start (exit 2, the setting
named, no traceback), and the 413 of an oversized ingest body that its client can read."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import yaml

from tests.integration.helpers import cluster_config
from txnwatch_dev.net import free_port, wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.observability.prometheus import PrometheusProcess
from txnwatch_dev.procs import stop_group

pytestmark = pytest.mark.integration
# what the error tests' exporters are given: nothing is polled before the addresses are bound
UNUSED_BROKER = "127.0.0.1:1"


def every_interface_exporter(bootstrap: str, log_path, **kwargs) -> ExporterProcess:
    """An exporter whose file sets the port alone, the host left to its default (ExporterProcess
    writes 127.0.0.1 there)."""
    exp = ExporterProcess(cluster_config(bootstrap), log_path=log_path, **kwargs)
    exp.config_path.write_text(yaml.safe_dump({**cluster_config(bootstrap), "http": {"port": exp.port}}))
    return exp


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def healthcheck(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "txnwatch.cli", "healthcheck", *args],
                          capture_output=True, text=True, timeout=30)


def scraped_up(prom: PrometheusProcess, targets: int) -> bool:
    up = prom.query('up{job="txnwatch"} == 1')
    return len(up) == targets and bool(prom.query('txnwatch_build_info{job="txnwatch"}'))


def test_every_interface_by_default_a_real_prometheus_scrapes_it_over_ipv6_and_ipv4(broker, tmp_path):
    exp = every_interface_exporter(broker.bootstrap, tmp_path / "exporter.log").start()  # /healthz on 127.0.0.1
    prom = PrometheusProcess([f"[::1]:{exp.port}", f"127.0.0.1:{exp.port}"], log_path=tmp_path / "prom.log")
    try:
        prom.start()
        wait_for(lambda: scraped_up(prom, 2), 60, what="Prometheus scraping the exporter at [::1] and 127.0.0.1")
        assert {t["labels"]["instance"] for t in prom.api("targets")["activeTargets"]} == \
            {f"[::1]:{exp.port}", f"127.0.0.1:{exp.port}"}
        assert f"serving on http://[::]:{exp.port}/ (metrics at /metrics)" in exp.log()
        assert "no IPv6" not in exp.log()
        # the healthcheck reads where the process says it listens
        hc = healthcheck("--config", str(exp.config_path))
        assert hc.returncode == 0 and f"http://127.0.0.1:{exp.port}/healthz: 200" in hc.stdout, hc
    finally:
        prom.stop()
        exp.stop()


def test_explicit_addresses_and_the_telemetry_path_scraped_by_prometheus(broker, tmp_path):
    v6, v4 = free_port(), free_port()
    config = cluster_config(broker.bootstrap)
    del config["clusters"][0]["poll_interval_seconds"]          # polls timed to the scrapes: the page tells of them
    exp = ExporterProcess(config, port=v4, log_path=tmp_path / "exporter.log",
                          extra_args=["--web.listen-address", f"[::1]:{v6}", "--web.listen-address", f"127.0.0.1:{v4}",
                                      "--web.telemetry-path", "/txnwatch/metrics"]).start()
    prom = PrometheusProcess([f"[::1]:{v6}"], log_path=tmp_path / "prom.log",
                             scrape={"metrics_path": "/txnwatch/metrics"})
    try:
        prom.start()
        wait_for(lambda: scraped_up(prom, 1), 60, what="Prometheus scraping [::1] at the telemetry path")
        # its scrapes there are what the polls are timed to (before any other client asks it)
        wait_for(lambda: "each poll timed to be done just before the next scrape of 1 scraper(s)" in exp.get("/")[1],
                 60, what="the exporter to learn Prometheus's cadence from its scrapes")
        assert f"serving on http://[::1]:{v6}/, http://127.0.0.1:{v4}/ (metrics at /txnwatch/metrics)" in exp.log()
        assert exp.get("/metrics")[0] == 404 and exp.get("/txnwatch/metrics")[0] == 200
        assert "href='/txnwatch/metrics'" in exp.get("/")[1]                     # the page links the path
        # [::1] alone on that port: IPv4 loopback does not reach it
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", v6), timeout=5).close()
    finally:
        prom.stop()
        exp.stop()


def test_the_healthcheck_follows_a_port_given_to_serve_as_a_flag(broker, tmp_path):
    in_file, flagged = free_port(), free_port()
    exp = ExporterProcess(cluster_config(broker.bootstrap), port=in_file, log_path=tmp_path / "exporter.log",
                          extra_args=["--port", str(flagged)])
    exp.port = flagged                  # where it listens (and start() waits): the flag's port
    exp.start()
    try:
        hc = healthcheck("--config", str(exp.config_path))
        assert hc.returncode == 0 and f"http://127.0.0.1:{flagged}/healthz: 200" in hc.stdout, hc
    finally:
        exp.stop()
    # a clean stop removes the record: the healthcheck goes by the file again, and nothing is there
    down = healthcheck("--config", str(exp.config_path))
    assert down.returncode == 1 and f"http://127.0.0.1:{in_file}/healthz" in down.stderr, down


def test_an_oversized_ingest_body_gets_a_413_its_client_reads(broker, tmp_path):
    exp = ExporterProcess(cluster_config(broker.bootstrap), log_path=tmp_path / "exporter.log").start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", exp.port, timeout=30)
        # http.client sends the whole body before it reads the answer, as most clients do
        conn.request("POST", "/api/v1/spark/events", body=b"{" + b" " * 5_000_000 + b"}",
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 413
        assert json.loads(resp.read()) == {"error": "body larger than 1000000 bytes", "field": "body"}
        conn.close()
        assert exp.metrics().get_value("txnwatch_listener_events_dropped_total", reason="too_large") == 1
    finally:
        exp.stop()


# ------------------------------------------------------------------ no IPv6, and refused addresses

def _libseccomp():
    name = ctypes.util.find_library("seccomp")
    return ctypes.CDLL(name, use_errno=True) if name else None


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def kernel_without_ipv6() -> None:
    """preexec_fn: socket(AF_INET6, ...) fails with EAFNOSUPPORT in this process and its
    children, as on a kernel without IPv6 (ipv6.disable=1) or under systemd's
    RestrictAddressFamilies, which does this with the same seccomp filter."""
    lib = _libseccomp()
    lib.seccomp_init.restype = ctypes.c_void_p
    ctx = ctypes.c_void_p(lib.seccomp_init(ctypes.c_uint32(0x7FFF0000)))           # SCMP_ACT_ALLOW
    cmp = _ArgCmp(0, 4, socket.AF_INET6, 0)                                       # arg 0 == AF_INET6
    action = ctypes.c_uint32(0x00050000 | errno.EAFNOSUPPORT)                     # SCMP_ACT_ERRNO
    if lib.seccomp_rule_add_array(ctx, action, lib.seccomp_syscall_resolve_name(b"socket"), 1,
                                  ctypes.byref(cmp)) or lib.seccomp_load(ctx):
        os._exit(97)


@pytest.fixture
def seccomp() -> None:
    """These tests fail, never skip, where what they need is missing: the suite runs as root on
    Debian, where libseccomp2, unshare and setpriv are part of the base system."""
    if _libseccomp() is None:
        pytest.fail("libseccomp (Debian's libseccomp2) is not installed: apt-get install libseccomp2")


needs_seccomp = pytest.mark.usefixtures("seccomp")


def serve(*args: str, log=subprocess.PIPE, env: dict | None = None, prefix: tuple[str, ...] = (),
          **popen) -> subprocess.Popen:
    """`txnwatch serve` (its output to `log`: a file for one that keeps running, whose pollers
    log on and would fill a pipe nobody reads)."""
    return subprocess.Popen([*prefix, sys.executable, "-m", "txnwatch.cli", "serve", *args], stdout=log,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})},
                            start_new_session=True, **popen)


def refused(*args: str, **kwargs) -> str:
    """What `serve` says when it refuses to start: exit 2, no traceback."""
    proc = serve("--bootstrap-servers", UNUSED_BROKER, *args, **kwargs)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        stop_group(proc, 10)
    assert proc.returncode == 2 and "Traceback" not in out, out
    return out


@needs_seccomp
def test_every_interface_falls_back_to_ipv4_where_the_kernel_has_no_ipv6(tmp_path):
    port = free_port()
    with open(tmp_path / "exporter.log", "w") as out:
        proc = serve("--bootstrap-servers", UNUSED_BROKER, "--port", str(port), log=out,
                     preexec_fn=kernel_without_ipv6)
    try:
        wait_for(lambda: proc.poll() is not None or status(f"http://127.0.0.1:{port}/healthz") == 200, 30,
                 what="the exporter on 0.0.0.0")
        assert proc.poll() is None
    finally:
        stop_group(proc, 15)
    log = (tmp_path / "exporter.log").read_text()
    assert log.count("no IPv6 on this host (Address family not supported by protocol): listening on 0.0.0.0") \
        == 1, log
    assert f"serving on http://0.0.0.0:{port}/" in log


@needs_seccomp
def test_an_explicit_ipv6_address_without_ipv6_is_an_error_not_a_fallback():
    port = free_port()
    out = refused("--web.listen-address", f"[::1]:{port}", preexec_fn=kernel_without_ipv6)
    assert f"http.listen_addresses[0]: cannot listen on [::1]:{port}: this host has no IPv6" in out
    assert "(set by --web.listen-address)" in out
    out = refused("--host", "::", "--port", str(port), preexec_fn=kernel_without_ipv6)
    assert f"http.host: cannot listen on [::]:{port}: this host has no IPv6" in out and "(set by --host)" in out


def fresh_network(ipv6: bool = True) -> list[str]:
    """A command prefix: a network namespace of its own, loopback only (no route out, so a name
    lookup fails here without a packet sent), IPv6 switched off by sysctl unless `ipv6`."""
    off = "" if ipv6 else " && sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.lo.disable_ipv6=1"
    return ["unshare", "--net", "sh", "-c", f"ip link set lo up{off} && exec \"$@\"", "sh"]


def _namespaces_work() -> bool:
    try:
        return subprocess.run(fresh_network(ipv6=False) + ["true"], capture_output=True, timeout=30).returncode == 0
    except OSError:
        return False


@pytest.fixture
def namespaces() -> None:
    if not _namespaces_work():
        pytest.fail("no network namespaces here (unshare --net needs root or CAP_SYS_ADMIN): run the tests as root")


needs_namespaces = pytest.mark.usefixtures("namespaces")


@pytest.fixture
def root() -> None:
    if os.geteuid() != 0:
        pytest.fail("becoming an unprivileged user (setpriv) needs root: run the tests as root")


@needs_namespaces
def test_where_ipv6_is_switched_off_every_interface_still_binds_and_serves_ipv4(tmp_path):
    """With IPv6 off by sysctl bind(::) still succeeds and IPv4 reaches it mapped, so nothing
    falls back; the healthcheck, in that network, goes by IPv4 loopback."""
    port = free_port()
    config = tmp_path / "txnwatch.yaml"
    config.write_text(yaml.safe_dump({**cluster_config(UNUSED_BROKER), "http": {"port": port}}))
    with open(tmp_path / "exporter.log", "w") as out:
        proc = serve("--config", str(config), log=out, prefix=tuple(fresh_network(ipv6=False)))
    inside = ("nsenter", f"--net=/proc/{proc.pid}/ns/net")      # sh exec'd the exporter: the same pid
    try:
        wait_for(lambda: proc.poll() is not None or healthcheck("--config", str(config), prefix=inside).returncode
                 == 0, 30, what="the healthcheck inside the namespace")
        assert proc.poll() is None
        ipv6 = subprocess.run([*inside, sys.executable, "-c", f"import socket; socket.create_connection(('::1', {port}))"],
                              capture_output=True, text=True, timeout=30)
        assert "Cannot assign requested address" in ipv6.stderr      # IPv6 is off in there
    finally:
        stop_group(proc, 15)
    log = (tmp_path / "exporter.log").read_text()
    assert f"serving on http://[::]:{port}/" in log and "no IPv6" not in log, log


@needs_namespaces
def test_a_host_name_that_does_not_resolve_is_refused_naming_its_variable():
    port = free_port()
    out = refused("--port", str(port), env={"TXNWATCH_HOST": "nosuch.invalid"}, prefix=tuple(fresh_network()))
    assert f"http.host: cannot listen on nosuch.invalid:{port}: 'nosuch.invalid' does not resolve" in out
    assert "(set by TXNWATCH_HOST)" in out


def test_a_taken_port_is_refused_naming_the_setting(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = refused("--web.listen-address", f"127.0.0.1:{port}")
        assert f"http.listen_addresses[0]: cannot listen on 127.0.0.1:{port}: the port is in use (another process " \
               "listens on it): choose another port" in out and "(set by --web.listen-address)" in out
        # every interface takes IPv4 too: the same port is taken for it, and it does not fall back
        out = refused("--port", str(port))
        assert f"http.port: cannot listen on [::]:{port}: the port is in use" in out and "(set by --port)" in out
        config = tmp_path / "txnwatch.yaml"                   # a file's key: named with the file
        config.write_text(yaml.safe_dump({"http": {"listen_addresses": [f"localhost:{port}"]}}))
        out = refused("--config", str(config))
        assert f"config error in {config}: http.listen_addresses[0]: cannot listen on localhost:{port}: the port " \
               "is in use" in out and "set by" not in out


def test_an_address_that_is_not_this_hosts_is_refused():
    port = free_port()
    out = refused("--web.listen-address", f"192.0.2.1:{port}")     # TEST-NET-1: bind sends nothing
    assert f"cannot listen on 192.0.2.1:{port}: 192.0.2.1 is not an address of this host" in out
    assert "(set by --web.listen-address)" in out


@pytest.mark.usefixtures("root")
def test_a_port_below_1024_is_refused_to_an_unprivileged_user():
    out = refused("--port", "1000", prefix=("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"), cwd="/")
    assert "http.port: cannot listen on [::]:1000: not permitted (ports below 1024 need root or the " \
           "CAP_NET_BIND_SERVICE capability): choose a port of 1024 or above (set by --port)" in out


def test_a_second_address_that_cannot_be_bound_stops_the_start_before_serving():
    good = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        out = refused("--web.listen-address", f"127.0.0.1:{good}", "--web.listen-address", f"127.0.0.1:{taken}")
    assert f"http.listen_addresses[1]: cannot listen on 127.0.0.1:{taken}" in out and "serving on" not in out
    # the first address was let go
    with socket.socket() as again:
        again.bind(("127.0.0.1", good))


def test_sigterm_removes_the_record(tmp_path):
    port = free_port()
    with open(tmp_path / "exporter.log", "w") as out:
        proc = serve("--bootstrap-servers", UNUSED_BROKER, "--host", "127.0.0.1", "--port", str(port), log=out,
                     env={"TMPDIR": str(tmp_path)})
    try:
        record = tmp_path / f"txnwatch-serve-{proc.pid}.json"
        wait_for(record.exists, 30, what="the serving process's record")
        assert json.loads(record.read_text())["urls"] == [f"http://127.0.0.1:{port}"]
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    finally:
        stop_group(proc, 10)
    assert proc.returncode == 0 and not record.exists()
