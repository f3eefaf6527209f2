"""The configuration as immutable values (Config, ClusterConfig, HttpConfig, CanaryConfig),
ConfigError, and the secret references they may hold (`${env:NAME}`, `${file:/path}`: never
logged or rendered, see `redacted`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..apps import AppRule
from ..metrics import DEFAULT_CLUSTER_LABEL
from .schema import DEFAULT_PORT
from .web import WebConfig

SECRET_KEY_RE = re.compile(r"(password|secret|token|credential|\.key$|key\.pem|sasl\.jaas)", re.I)
# ...but where a secret is, never one itself (sasl.oauthbearer.token.endpoint.url, https.ca.location)
NOT_SECRET_KEY_RE = re.compile(r"\.(url|location|method|type)$", re.I)


def is_secret_key(key: str) -> bool:
    """Whether a client property holds a secret, by its name."""
    return bool(SECRET_KEY_RE.search(key)) and not NOT_SECRET_KEY_RE.search(key)
_REF_RE = re.compile(r"^\$\{(env|file):([^}]+)\}$")
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


class ConfigError(Exception):
    """A configuration problem; `key` is the dotted path of the offending setting."""

    def __init__(self, key: str, message: str, source: str | None = None) -> None:
        self.key, self.source, self.message = key, source, message
        where = f" in {source}" if source else ""
        super().__init__(f"config error{where}: {key}: {message}")


@dataclass(frozen=True)
class NameFilter:
    """Include/exclude regexes (re.fullmatch). Empty include means everything."""

    include: tuple[re.Pattern, ...] = ()
    exclude: tuple[re.Pattern, ...] = ()

    def __call__(self, name: str) -> bool:
        if self.include and not any(p.fullmatch(name) for p in self.include):
            return False
        return not any(p.fullmatch(name) for p in self.exclude)

    @property
    def everything(self) -> bool:
        return not self.include and not self.exclude

    def include_pattern(self) -> str | None:
        """The include list as one regular expression a broker can match names against
        (KIP-1152's full match, RE2/J syntax), or None when everything is included. The
        excludes are applied here only."""
        if not self.include:
            return None
        return "|".join(f"(?:{p.pattern})" for p in self.include)


# Default minimum seconds between poll starts. A worker process polls back to back (bounded by
# this and poll_duty_cycle) since serving no longer shares its interpreter; in-process polling
# keeps the long interval, as a back-to-back poll there slows scrapes (docs/benchmarks.md).
WORKER_POLL_INTERVAL = 1.0
IN_PROCESS_POLL_INTERVAL = 15.0


@dataclass(frozen=True)
class CanaryConfig:
    """The transactional canary of one cluster (off unless configured)."""

    enabled: bool = False
    interval_seconds: float = 10.0
    abort_every: int = 10                   # one round in N aborted on purpose; 0: never
    topic: str = "__txnwatch_canary"
    create_topic: bool = True               # create it when missing (needs Create on the topic)
    replication_factor: int | None = None   # None: min(3, brokers)
    visibility_timeout_seconds: float | None = None   # None: the interval
    instance: str | None = None             # None: the host name (and shard): in the transactional id




@dataclass(frozen=True)
class ClusterConfig:
    name: str
    bootstrap_servers: str
    # None: chosen by the process model (parse_config): back to back (1 s) in a worker
    # process, 15 s when polling shares the interpreter with serving
    poll_interval_seconds: float | None = None
    # "scrapes": each poll timed to be done just before the next scrape, learnt from the
    # scrapes (poll_interval_seconds is then the least time between poll starts), one poll per
    # poll_idle_interval_seconds while nobody scrapes. "interval": back to back from
    # poll_interval_seconds. parse_config picks "interval" when poll_interval_seconds is set.
    poll_schedule: str = "scrapes"
    poll_idle_interval_seconds: float = 60.0
    poll_duty_cycle: float = 0.5            # at most this share of wall time spent polling
    poll_timeout_seconds: float = 10.0
    # KIP-994 (Kafka 3.8+): list only transactions open at least this long (0: all open ones)
    open_transaction_min_age_seconds: float = 0.0
    client: Mapping[str, str] = field(default_factory=dict)
    topics: NameFilter = NameFilter(exclude=(re.compile(r"__.*"),))
    groups: NameFilter = NameFilter()
    # which transactional ids every source exports (KIP-1152 brokers, 4.1+, filter the listing)
    transactional_ids: NameFilter = NameFilter()
    app_rules: tuple[AppRule, ...] = ()
    max_transactional_id_series: int = 500
    # signal | partition | topic (exporter/poll/granularity.py): signal keeps a partition's own
    # series while it carries a signal and series_linger_seconds after
    granularity: str = "signal"
    series_apps: tuple[str, ...] = ()     # apps whose partitions and ids always keep their series
    series_linger_seconds: float = 3600.0
    series_group_still_seconds: float = 120.0   # a group behind this long without a commit
    transaction_log_tap: bool = False
    # Without KIP-664: an LSO stalled below the HWM this long counts as hanging.
    # None: the broker's transaction.max.timeout.ms + 5 min when known, else 20 min.
    hanging_threshold_seconds: float | None = None
    # KIP-939 two-phase-commit transactions never time out: a finding once one is open longer.
    two_phase_commit_max_age_seconds: float = 3600.0
    # Used when the broker does not return its configs (DescribeConfigs).
    default_transaction_max_timeout_ms: int = 900_000
    default_transactional_id_expiration_ms: int = 604_800_000
    describe_configs_every: int = 20         # polls between DescribeConfigs refreshes
    canary: CanaryConfig = CanaryConfig()

    def client_properties(self) -> dict[str, str]:
        """librdkafka properties with ${env:}/${file:} references resolved."""
        props = {"bootstrap.servers": self.bootstrap_servers}
        props.update({k: resolve_secret(v) for k, v in self.client.items()})
        return props

    def redacted_client(self) -> dict[str, str]:
        return redacted(self.client)


@dataclass(frozen=True)
class Origin:
    """Where a setting's value came from, for an error found after loading (a port that cannot
    be bound): its dotted key and the flag or variable that set it (None: the file), or the
    default."""

    key: str
    set_by: str | None = None
    default: bool = False

    def error(self, message: str, source: str | None) -> ConfigError:
        if self.default:
            return ConfigError(self.key, f"{message} (the default: set another by --web.listen-address, or "
                                         "--host and --port)")
        return ConfigError(self.key, f"{message} (set by {self.set_by})" if self.set_by else message, source)


@dataclass(frozen=True)
class ListenAddress:
    """One address the HTTP server listens on. An empty host is every interface: `[::]` with
    IPv4 mapped, or 0.0.0.0 where the host has no IPv6 (exporter/serve/listen.py)."""

    host: str
    port: int
    host_origin: Origin = Origin("http.host", default=True)
    port_origin: Origin = Origin("http.port", default=True)

    @property
    def every_interface(self) -> bool:
        return self.host == ""

    def netloc(self, host: str | None = None) -> str:
        """host:port, an IPv6 address in brackets; `host` instead of this one's."""
        h = self.host if host is None else host
        return f"[{h}]:{self.port}" if ":" in h else f"{h}:{self.port}"


@dataclass(frozen=True)
class HttpConfig:
    # Where to listen: host and port (one address; an empty host is every interface), or
    # listen_addresses (several); `listen` is the outcome, set by the parser, else from these.
    host: str = ""
    port: int = DEFAULT_PORT
    listen_addresses: tuple[str, ...] = ()
    telemetry_path: str = "/metrics"
    listen: tuple[ListenAddress, ...] = ()
    threads: int = 8
    ingest_token: str | None = None        # bearer token for POST /api/v1/spark/events
    ingest_max_bytes: int = 1_000_000
    spark_query_ttl_seconds: float = 600.0
    # Access to /metrics and / (not /healthz, /readyz): the web config's basic-auth users, or
    # a bearer token.
    auth_bearer_token: str | None = None
    web_config_file: str | None = None
    web: WebConfig = WebConfig()             # loaded from web_config_file
    # Each cluster's poller and tap in a worker process of its own (the serving process then
    # holds no Kafka client); false runs them as threads of the serving process.
    worker_processes: bool = True

    def __post_init__(self) -> None:
        if not self.listen:       # built in code (tests, benchmarks): the one address of host and port
            object.__setattr__(self, "listen", (ListenAddress(self.host, self.port),))

    @property
    def loopback_only(self) -> bool:
        return all(a.host in LOOPBACK for a in self.listen)

    @property
    def tls(self) -> bool:
        return self.web.tls is not None

    @property
    def scheme(self) -> str:
        return self.web.scheme


@dataclass(frozen=True)
class Config:
    clusters: tuple[ClusterConfig, ...]
    http: HttpConfig = HttpConfig()
    log_level: str = "INFO"
    source: str | None = None
    log_format: str = "text"       # text, json or logfmt (logsetup.FORMATS)
    cluster_label: str = DEFAULT_CLUSTER_LABEL   # the label carrying ClusterConfig.name on Kafka-side series

    def secret_values(self) -> list[str]:
        """Every configured secret (SASL passwords, tokens): log lines never show them."""
        out = [v for c in self.clusters for k, v in c.client_properties().items()
               if k in c.redacted_client() and c.redacted_client()[k] == "***"]
        for v in (self.http.ingest_token, self.http.auth_bearer_token):
            if v:
                out.append(v)
        return out


def resolve_secret(value: str) -> str:
    m = _REF_RE.match(str(value))
    if not m:
        return str(value)
    kind, ref = m.groups()
    if kind == "env":
        if ref not in os.environ:
            raise ConfigError(ref, f"environment variable {ref} is not set")
        return os.environ[ref]
    try:
        return Path(ref).read_text().strip()
    except OSError as exc:
        raise ConfigError(ref, f"cannot read secret file: {exc.strerror}") from None


def redacted(props: Mapping[str, Any]) -> dict[str, str]:
    return {k: ("***" if is_secret_key(k) else str(v)) for k, v in props.items()}


