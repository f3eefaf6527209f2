"""A local MIT Kerberos KDC for tests (Debian's krb5-kdc), run as the test's own process: its
own realm, database, krb5.conf and kdc.conf in one directory, on one loopback port (UDP and
TCP). The packaged krb5-kdc service and /etc/krb5.conf are never used.

    with Kdc(workdir) as kdc:                          # realm TXNWATCH.TEST
        kdc.add_principal("txnwatch")                  # a random key: it logs in from a keytab
        kdc.add_principal("alice", password="pw")
        kdc.add_principal("kafka/127.0.0.1")           # a service (a broker)
        kdc.set_lifetimes("txnwatch", max_life=60, max_renewable_life=90)
        kdc.keytab(["txnwatch"], tmp / "txnwatch.keytab")
        kdc.krb5_conf                                  # every client's KRB5_CONFIG, a JVM's java.security.krb5.conf
        kdc.kinit("txnwatch", keytab=..., ccache=...)  # a ticket, as `kinit -kt` gets it
        kdc.tickets(ccache)                            # what a credential cache holds (klist)
        with kdc.outage(): ...                         # connection refused; back on the same port
        Kdc(clockskew=5)                               # tolerated clock difference, KDC and clients alike
        Kdc(timesync=False)                            # clients do not adopt the KDC's clock

Clients find the KDC through `krb5_conf` only (no DNS): `rdns = false` and
`dns_canonicalize_hostname = false`, so a client connecting to 127.0.0.1 asks for
service/127.0.0.1, and TCP first (`udp_preference_limit = 1`). Its default ccache is a file in
the KDC's directory, so a client that names no ccache of its own never touches the user's.
`skewed_clock_env(seconds)` runs a client process with its clock off by that much (libfaketime).
MIT clients adopt the KDC's clock from its first answer (`kdc_timesync`, on by default), so a
skewed client still gets tickets; with `timesync=False` it gets "Clock skew too great".
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..net import free_port, port_open, wait_for
from ..procs import stop_group

REALM = "TXNWATCH.TEST"
READY_LINE = "commencing operation"
MASTER_PASSWORD = "txnwatch-kdc-master"
# aes-sha1: what Debian's MIT 1.20 makes by default and every JDK 17 and librdkafka host accepts
ENCTYPES = "aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal"
# what bootstrap installs for each program (scripts/bootstrap.sh)
TOOLS = {"krb5kdc": "krb5-kdc", "kdb5_util": "krb5-kdc", "kadmin.local": "krb5-admin-server",
         "kinit": "krb5-user", "klist": "krb5-user"}
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


class KdcUnavailable(RuntimeError):
    """A program the KDC or its clients need is missing; the message names the apt package."""


def tool(name: str) -> str:
    """The path of one MIT Kerberos program (the admin ones live in /usr/sbin, which a
    non-root PATH may lack)."""
    found = shutil.which(name) or next((str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name)
                                        if os.access(p, os.X_OK)), None)
    if found is None:
        raise KdcUnavailable(f"{name} not found: the tests' Kerberos KDC needs MIT Kerberos from apt "
                             f"(apt-get install {TOOLS.get(name, 'krb5-kdc krb5-admin-server krb5-user')}; "
                             "scripts/bootstrap.sh installs it)")
    return found


def udp_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def kdc_port(host: str) -> int:
    """A registry port (txnwatch_dev.net) that is free for UDP as well: the KDC serves both."""
    for _ in range(50):
        port = free_port(host)
        if udp_free(host, port):
            return port
    raise RuntimeError(f"no port free for both TCP and UDP on {host}")


def kerberos_duration(seconds: float) -> str:
    """kadmin's form of a duration ("90 seconds")."""
    return f"{int(seconds)} seconds"


@dataclass(frozen=True)
class Ticket:
    """One entry of a credential cache, as klist shows it (local time, naive)."""

    service: str
    starts: datetime.datetime
    expires: datetime.datetime
    renew_until: datetime.datetime | None


def parse_klist(text: str) -> tuple[str | None, list[Ticket]]:
    """(default principal, tickets) of `klist` output under LC_ALL=C (pure)."""
    principal, tickets = None, []
    fmt = "%m/%d/%y %H:%M:%S"
    for line in text.splitlines():
        if line.startswith("Default principal:"):
            principal = line.split(":", 1)[1].strip()
            continue
        parts = line.split()
        if len(parts) == 5 and "/" in parts[0]:
            starts = datetime.datetime.strptime(f"{parts[0]} {parts[1]}", fmt)
            expires = datetime.datetime.strptime(f"{parts[2]} {parts[3]}", fmt)
            tickets.append(Ticket(parts[4], starts, expires, None))
        elif line.strip().startswith("renew until") and tickets:
            until = datetime.datetime.strptime(" ".join(line.split()[2:4]), fmt)
            last = tickets.pop()
            tickets.append(Ticket(last.service, last.starts, last.expires, until))
    return principal, tickets


def skewed_clock_env(seconds: int) -> dict[str, str]:
    """Environment for a child process whose wall clock is `seconds` off (libfaketime, apt's
    libfaketime): the client side of a clock skew. Monotonic clocks stay true."""
    if not FAKETIME_LIB.exists():
        raise KdcUnavailable(f"{FAKETIME_LIB} not found: a skewed client clock needs libfaketime "
                             "(apt-get install libfaketime)")
    return {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": f"{seconds:+d}", "DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_DONT_RESET": "1"}


class Kdc:
    """One MIT krb5kdc of its own realm, database and configuration, in `workdir`."""

    def __init__(self, workdir: str | os.PathLike | None = None, realm: str = REALM, host: str = "127.0.0.1",
                 *, clockskew: int = 300, timesync: bool = True, max_life: int = 36000,
                 max_renewable_life: int = 7 * 86400) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="txnwatch-kdc-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.realm = realm
        self.host = host
        self.port = kdc_port(host)
        self.clockskew = clockskew
        self.timesync = timesync
        self.max_life = max_life
        self.max_renewable_life = max_renewable_life
        self.krb5_conf = self.workdir / "krb5.conf"
        self.kdc_conf = self.workdir / "kdc.conf"
        self.log_path = self.workdir / "kdc.log"
        self.default_ccache = self.workdir / "krb5cc_default"
        self.proc: subprocess.Popen | None = None
        self._log_offset = 0

    # -- facts
    def principal(self, name: str) -> str:
        """A full principal name: `name@REALM` unless it names a realm."""
        return name if "@" in name else f"{name}@{self.realm}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment without any Kerberos variable of the user's, pointed at
        this realm's krb5.conf (for the KDC's programs and client processes)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KRB5")}
        env.update({"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf), "LC_ALL": "C"})
        env.update(extra or {})
        return env

    def client_env(self, keytab: str | os.PathLike, ccache: str,
                   extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment of a client process that logs in from `keytab` by itself (MIT's client
        keytab: initial tickets and their refresh, no kinit) into its own `ccache`."""
        return self.env({"KRB5_CLIENT_KTNAME": f"FILE:{keytab}", "KRB5CCNAME": ccache, **(extra or {})})

    def server_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- configuration
    def _write_krb5_conf(self) -> None:
        r = self.realm
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f"    default_realm = {r}\n"
            "    dns_lookup_realm = false\n    dns_lookup_kdc = false\n"
            "    dns_canonicalize_hostname = false\n    rdns = false\n"
            "    udp_preference_limit = 1\n"
            f"    clockskew = {self.clockskew}\n"
            f"    kdc_timesync = {int(self.timesync)}\n"
            "    ticket_lifetime = 24h\n    renew_lifetime = 7d\n    forwardable = false\n"
            f"    default_ccache_name = FILE:{self.default_ccache}\n"
            f"\n[realms]\n    {r} = {{\n        kdc = {self.address}\n    }}\n"
            f"\n[domain_realm]\n    127.0.0.1 = {r}\n    localhost = {r}\n")

    def _write_kdc_conf(self) -> None:
        d, r, listen = self.workdir, self.realm, self.address
        self.kdc_conf.write_text(
            f"[kdcdefaults]\n    kdc_listen = {listen}\n    kdc_tcp_listen = {listen}\n"
            f"\n[realms]\n    {r} = {{\n"
            f"        database_name = {d / 'principal'}\n        key_stash_file = {d / 'stash'}\n"
            f"        acl_file = {d / 'kadm5.acl'}\n"
            f"        kdc_listen = {listen}\n        kdc_tcp_listen = {listen}\n"
            f"        max_life = {self.max_life}s\n"
            f"        max_renewable_life = {self.max_renewable_life}s\n"
            "        master_key_type = aes256-cts-hmac-sha1-96\n"
            f"        supported_enctypes = {ENCTYPES}\n"
            "        default_principal_flags = +preauth\n    }\n"
            f"\n[logging]\n    kdc = FILE:{self.log_path}\n    admin_server = FILE:{d / 'kadmin.log'}\n"
            f"    default = FILE:{d / 'krb5lib.log'}\n")
        (d / "kadm5.acl").write_text("")

    def _create_database(self) -> None:
        """The realm's database and stash, once (kdb5_util, reading kdc.conf)."""
        if (self.workdir / "principal").exists():
            return
        self._run([tool("kdb5_util"), "create", "-s", "-r", self.realm, "-P", MASTER_PASSWORD], "kdb5_util create")

    def _run(self, cmd: list[str], what: str) -> str:
        out = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=60,
                             cwd=self.workdir, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"{what} exited {out.returncode}: {(out.stderr or out.stdout).strip()[-1500:]}")
        return out.stdout

    def kadmin(self, query: str) -> str:
        """One kadmin.local command on the realm's database (no kadmind, no admin principal).
        kadmin.local exits 0 when the command fails: its error is a `command: message` line."""
        out = subprocess.run([tool("kadmin.local"), "-r", self.realm, "-q", query], env=self.env(),
                             capture_output=True, text=True, timeout=60, cwd=self.workdir, stdin=subprocess.DEVNULL)
        errors = [ln for ln in out.stderr.splitlines() if re.match(r"[\w.]+: ", ln)]
        if out.returncode != 0 or errors:
            raise RuntimeError(f"kadmin.local -q {query!r}: {'; '.join(errors) or out.stderr.strip()[-1500:]}")
        return out.stdout

    # -- principals and keytabs
    def add_principal(self, name: str, password: str | None = None, *, max_life: float | None = None,
                      max_renewable_life: float | None = None) -> str:
        """A principal with `password`, else a random key (for keytabs); returns its full name."""
        secret = f'-pw "{password}"' if password is not None else "-randkey"
        self.kadmin(f"addprinc {secret} {self.principal(name)}")
        if max_life is not None or max_renewable_life is not None:
            self.set_lifetimes(name, max_life, max_renewable_life)
        return self.principal(name)

    def set_lifetimes(self, name: str, max_life: float | None = None,
                      max_renewable_life: float | None = None) -> None:
        """Cap the tickets issued to (and for) `name`: a test watches one expire within a
        minute. A ticket lives min(client's, service's, realm's max_life, what was asked)."""
        opts = []
        if max_life is not None:
            opts.append(f'-maxlife "{kerberos_duration(max_life)}"')
        if max_renewable_life is not None:
            opts.append(f'-maxrenewlife "{kerberos_duration(max_renewable_life)}" +allow_renewable')
        self.kadmin(f"modprinc {' '.join(opts)} {self.principal(name)}")

    def keytab(self, principals: Iterable[str], path: str | os.PathLike) -> Path:
        """A keytab holding the current keys of `principals` (keys are not changed, so earlier
        keytabs and passwords stay valid)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        names = " ".join(self.principal(n) for n in principals)
        self.kadmin(f"ktadd -k {p} -norandkey {names}")
        return p

    # -- clients' view
    def kinit(self, name: str, *, ccache: str, keytab: str | os.PathLike | None = None,
              password: str | None = None, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """`kinit` from a keytab or with a password into `ccache`; the completed process (a
        test looks at its return code and message)."""
        cmd = [tool("kinit"), "-c", ccache]
        cmd += ["-k", "-t", str(keytab)] if keytab is not None else []
        return subprocess.run([*cmd, self.principal(name)], env=self.env(env), capture_output=True, text=True,
                              timeout=60, input=f"{password}\n" if password is not None else None)

    def tickets(self, ccache: str) -> list[Ticket]:
        """The tickets in `ccache` (empty if there is none)."""
        out = subprocess.run([tool("klist"), "-c", ccache], env=self.env(), capture_output=True, text=True,
                             timeout=30)
        return parse_klist(out.stdout)[1] if out.returncode == 0 else []

    # -- lifecycle
    def start(self, timeout: float = 30.0) -> Kdc:
        if self.running():
            return self
        self._write_krb5_conf()
        self._write_kdc_conf()
        self._create_database()
        self._log_offset = len(self.server_log())
        with open(self.workdir / "krb5kdc.out", "ab") as out:
            self.proc = subprocess.Popen([tool("krb5kdc"), "-n", "-r", self.realm], env=self.env(), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.workdir)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        def ready() -> bool:
            return self.proc.poll() is not None or (
                READY_LINE in self.server_log()[self._log_offset:] and port_open(self.host, self.port))

        wait_for(ready, timeout, what=f"the KDC of {self.realm} on {self.address}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"krb5kdc exited {self.proc.returncode} at start: "
                               f"{self.server_log()[self._log_offset:][-1500:]}"
                               f"{(self.workdir / 'krb5kdc.out').read_text(errors='replace')[-500:]}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        stop_group(self.proc, timeout)

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The KDC is down (connections refused) inside the block, back on the same port after."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Kdc:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()
