"""Configuration: flags > TXNWATCH_* environment > YAML file > defaults.

A bad config raises ConfigError naming the key (as a dotted path) and the file, or the
flag or variable the value came from; the CLI turns it into exit status 2. Secrets in
client properties may be given as `${env:NAME}` or `${file:/path}` and are never logged
or rendered (see `redacted`). The keys are declared once in txnwatch.config_schema: the
key sets below, the environment mapping and the JSON Schema come from there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .apps import KNOWN_SCHEMES, AppRule
from .config_schema import DEFAULT_PORT, LABEL_NAME_RE, LOG_FORMATS, LOG_LEVELS, ROOT, Key
from .metrics import DEFAULT_CLUSTER_LABEL

SECRET_KEY_RE = re.compile(r"(password|secret|token|credential|\.key$|key\.pem|sasl\.jaas)", re.I)
_REF_RE = re.compile(r"^\$\{(env|file):([^}]+)\}$")


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


# The parser's key sets, from the one declaration (txnwatch.config_schema).
_TOP_KEYS = ROOT.names
_HTTP_KEYS = ROOT.child("http").names
_AUTH_KEYS = ROOT.child("http").child("auth").names
_TLS_KEYS = ROOT.child("http").child("tls").names
_CLUSTER_KEYS = ROOT.child("clusters").items.names
_CANARY_KEYS = ROOT.child("clusters").items.child("canary").names
_FILTER_KEYS = ROOT.child("clusters").items.child("topics").names
_APP_RULE_KEYS = ROOT.child("clusters").items.child("app_rules").items.names


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    bootstrap_servers: str
    # None: chosen by the process model (parse_config): back to back (1 s) in a worker
    # process, 15 s when polling shares the interpreter with serving
    poll_interval_seconds: float | None = None
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
    granularity: str = "partition"          # partition | topic
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
class HttpConfig:
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    threads: int = 8
    ingest_token: str | None = None        # bearer token for POST /api/v1/spark/events
    ingest_max_bytes: int = 1_000_000
    spark_query_ttl_seconds: float = 600.0
    # Access to /metrics and / (not /healthz, /readyz): basic auth or a bearer token.
    auth_username: str | None = None
    auth_password: str | None = None
    auth_bearer_token: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # Each cluster's poller and tap in a worker process of its own (the serving process then
    # holds no Kafka client); false runs them as threads of the serving process.
    worker_processes: bool = True

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)


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
        for v in (self.http.ingest_token, self.http.auth_password, self.http.auth_bearer_token):
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
    return {k: ("***" if SECRET_KEY_RE.search(k) else str(v)) for k, v in props.items()}


# ---------------------------------------------------------------- parsing helpers
class _Parser:
    def __init__(self, source: str | None) -> None:
        self.source = source

    def err(self, key: str, msg: str) -> ConfigError:
        return ConfigError(key, msg, self.source)

    def mapping(self, key: str, value: Any, allowed: set[str]) -> dict:
        if not isinstance(value, dict):
            raise self.err(key, f"expected a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.err(f"{key}.{unknown[0]}" if key else unknown[0],
                           f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return value

    def number(self, key: str, value: Any, minimum: float = 0, integer: bool = False,
               exclusive: bool = True) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise self.err(key, f"expected a number, got {type(value).__name__}")
        try:
            if integer and isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            n = int(value) if integer else float(value)
        except ValueError:
            raise self.err(key, f"expected a{'n integer' if integer else ' number'}, got {value!r}") from None
        if (n <= minimum) if exclusive else (n < minimum):
            raise self.err(key, f"must be {'>' if exclusive else '>='} {minimum}, got {value!r}")
        return n

    def boolean(self, key: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "1", "yes", "false", "0", "no"}:
            return value.lower() in {"true", "1", "yes"}
        raise self.err(key, f"expected true or false, got {value!r}")

    def string(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.err(key, f"expected a non-empty string, got {value!r}")
        return value.strip()

    def regex(self, key: str, value: Any) -> re.Pattern:
        s = self.string(key, value)
        try:
            return re.compile(s)
        except re.error as exc:
            raise self.err(key, f"bad regular expression {s!r}: {exc}") from None

    def name_filter(self, key: str, value: Any, default: NameFilter) -> NameFilter:
        if value is None:
            return default
        v = self.mapping(key, value, _FILTER_KEYS)
        out = {}
        for part in ("include", "exclude"):
            items = v.get(part) or []
            if isinstance(items, str):
                items = [items]
            if not isinstance(items, list):
                raise self.err(f"{key}.{part}", "expected a list of regular expressions")
            out[part] = tuple(self.regex(f"{key}.{part}[{i}]", p) for i, p in enumerate(items))
        if "exclude" not in v:
            out["exclude"] = default.exclude
        return NameFilter(**out)

    def app_rules(self, key: str, value: Any) -> tuple[AppRule, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.err(key, "expected a list of {match: REGEX, app: NAME} mappings")
        rules = []
        for i, item in enumerate(value):
            k = f"{key}[{i}]"
            item = self.mapping(k, item, _APP_RULE_KEYS)
            if "match" not in item or "app" not in item:
                raise self.err(k, "needs both `match` (regex) and `app` (name or template like \\1)")
            pattern = self.regex(f"{k}.match", item["match"])
            app = self.string(f"{k}.app", item["app"])
            try:  # check group references now, not at the first matching id
                _check_template(pattern, app)
            except (re.error, IndexError) as exc:
                raise self.err(f"{k}.app", f"bad template {app!r}: {exc}") from None
            scheme = item.get("scheme")
            if scheme is not None and scheme not in KNOWN_SCHEMES:
                raise self.err(f"{k}.scheme", f"unknown scheme {scheme!r}: one of {', '.join(sorted(KNOWN_SCHEMES))} "
                                              "(the id scheme of the framework that writes these ids)")
            rules.append(AppRule(pattern, app, scheme or f"user[{i}]"))
        return tuple(rules)

    def client(self, key: str, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.err(key, "expected a mapping of librdkafka properties")
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or isinstance(v, dict | list) or v is None:
                raise self.err(f"{key}.{k}", "librdkafka properties are scalar values")
            out[k] = str(v).lower() if isinstance(v, bool) else str(v)
            if _REF_RE.match(out[k]):
                try:
                    resolve_secret(out[k])  # fail early if the env var/file is missing
                except ConfigError as exc:
                    raise self.err(f"{key}.{k}", str(exc).split(": ", 2)[-1]) from None
        if "bootstrap.servers" in out:
            raise self.err(f"{key}.bootstrap.servers", "set bootstrap_servers on the cluster instead")
        return out

    def cluster(self, key: str, value: Any) -> ClusterConfig:
        v = self.mapping(key, value, _CLUSTER_KEYS)
        for req in ("name", "bootstrap_servers"):
            if req not in v:
                raise self.err(f"{key}.{req}", "is required")
        kw: dict[str, Any] = {"name": self.string(f"{key}.name", v["name"]),
                              "bootstrap_servers": self.string(f"{key}.bootstrap_servers",
                                                               _join(v["bootstrap_servers"]))}
        for num in ("poll_interval_seconds", "poll_timeout_seconds", "hanging_threshold_seconds",
                    "two_phase_commit_max_age_seconds"):
            if v.get(num) is not None:
                kw[num] = self.number(f"{key}.{num}", v[num])
        if v.get("open_transaction_min_age_seconds") is not None:
            kw["open_transaction_min_age_seconds"] = self.number(f"{key}.open_transaction_min_age_seconds",
                                                                 v["open_transaction_min_age_seconds"], exclusive=False)
        if v.get("poll_duty_cycle") is not None:
            duty = self.number(f"{key}.poll_duty_cycle", v["poll_duty_cycle"])
            if duty > 1:
                raise self.err(f"{key}.poll_duty_cycle", f"is a share of wall time, at most 1 (got {duty}): "
                                                         "0.5 lets polls take half the time")
            kw["poll_duty_cycle"] = duty
        for num in ("max_transactional_id_series", "default_transaction_max_timeout_ms",
                    "default_transactional_id_expiration_ms", "describe_configs_every"):
            if num in v:
                kw[num] = int(self.number(f"{key}.{num}", v[num], integer=True))
        if "granularity" in v:
            g = self.string(f"{key}.granularity", v["granularity"])
            if g not in ("partition", "topic"):
                raise self.err(f"{key}.granularity", f"must be partition or topic, got {g!r}")
            kw["granularity"] = g
        if "transaction_log_tap" in v:
            kw["transaction_log_tap"] = self.boolean(f"{key}.transaction_log_tap", v["transaction_log_tap"])
        kw["client"] = self.client(f"{key}.client", v.get("client"))
        kw["topics"] = self.name_filter(f"{key}.topics", v.get("topics"), ClusterConfig.topics)
        kw["groups"] = self.name_filter(f"{key}.groups", v.get("groups"), ClusterConfig.groups)
        kw["transactional_ids"] = self.name_filter(f"{key}.transactional_ids", v.get("transactional_ids"),
                                                   ClusterConfig.transactional_ids)
        kw["app_rules"] = self.app_rules(f"{key}.app_rules", v.get("app_rules"))
        if v.get("canary") is not None:
            kw["canary"] = self.canary(f"{key}.canary", v["canary"])
        return ClusterConfig(**kw)

    def canary(self, key: str, value: Any) -> CanaryConfig:
        if isinstance(value, bool):          # `canary: true` takes every default
            return CanaryConfig(enabled=value)
        v = self.mapping(key, value, _CANARY_KEYS)
        kw: dict[str, Any] = {"enabled": self.boolean(f"{key}.enabled", v.get("enabled", True))}
        for num in ("interval_seconds", "visibility_timeout_seconds"):
            if v.get(num) is not None:
                kw[num] = self.number(f"{key}.{num}", v[num])
        if "abort_every" in v:
            kw["abort_every"] = int(self.number(f"{key}.abort_every", v["abort_every"], integer=True,
                                                exclusive=False))
        if v.get("replication_factor") is not None:
            kw["replication_factor"] = int(self.number(f"{key}.replication_factor", v["replication_factor"],
                                                       integer=True))
        for text in ("topic", "instance"):
            if v.get(text) is not None:
                kw[text] = self.string(f"{key}.{text}", v[text])
        if "create_topic" in v:
            kw["create_topic"] = self.boolean(f"{key}.create_topic", v["create_topic"])
        return CanaryConfig(**kw)

    def http(self, key: str, value: Any) -> HttpConfig:
        if value is None:
            return HttpConfig()
        v = self.mapping(key, value, _HTTP_KEYS)
        kw: dict[str, Any] = {}
        if "host" in v:
            kw["host"] = self.string(f"{key}.host", v["host"])
        if "port" in v:
            kw["port"] = _port(self, f"{key}.port", v["port"])
        if "threads" in v:
            kw["threads"] = int(self.number(f"{key}.threads", v["threads"], integer=True))
        if v.get("ingest_token") is not None:
            kw["ingest_token"] = resolve_secret(self.string(f"{key}.ingest_token", v["ingest_token"]))
        if "ingest_max_bytes" in v:
            kw["ingest_max_bytes"] = int(self.number(f"{key}.ingest_max_bytes", v["ingest_max_bytes"],
                                                     integer=True))
        if "spark_query_ttl_seconds" in v:
            kw["spark_query_ttl_seconds"] = self.number(f"{key}.spark_query_ttl_seconds",
                                                        v["spark_query_ttl_seconds"])
        if "worker_processes" in v:
            kw["worker_processes"] = self.boolean(f"{key}.worker_processes", v["worker_processes"])
        if v.get("auth") is not None:
            a = self.mapping(f"{key}.auth", v["auth"], _AUTH_KEYS)
            for k in a:
                kw[f"auth_{k}"] = resolve_secret(self.string(f"{key}.auth.{k}", a[k]))
            if ("username" in a) != ("password" in a):
                raise self.err(f"{key}.auth", "basic auth needs both username and password")
            if not a:
                raise self.err(f"{key}.auth", "set username and password, or bearer_token")
        if v.get("tls") is not None:
            t = self.mapping(f"{key}.tls", v["tls"], _TLS_KEYS)
            for k in ("cert_file", "key_file"):
                if k not in t:
                    raise self.err(f"{key}.tls.{k}", "is required when tls is set")
                path = self.string(f"{key}.tls.{k}", t[k])
                if not Path(path).is_file():
                    raise self.err(f"{key}.tls.{k}", f"no such file: {path}")
                kw[f"tls_{k}"] = path
        return HttpConfig(**kw)


def _check_template(pattern: re.Pattern, template: str) -> None:
    """Raise if `template` references a group `pattern` lacks."""
    for m in re.finditer(r"\\(\d+)|\\g<(\w+)>", template):
        num, name = m.groups()
        if num is not None and int(num) > pattern.groups:
            raise re.error(f"group {num} does not exist (the pattern has {pattern.groups})")
        if name is not None and not name.isdigit() and name not in pattern.groupindex:
            raise re.error(f"group {name!r} does not exist")


def _join(v: Any) -> Any:
    return ",".join(map(str, v)) if isinstance(v, list) else v


def _port(p: _Parser, key: str, value: Any) -> int:
    n = int(p.number(key, value, integer=True))
    if not 0 < n < 65536:
        raise p.err(key, f"must be a TCP port (1-65535), got {value!r}")
    return n


def parse_config(data: Any, source: str | None = None) -> Config:
    """Build a Config from a YAML document (already loaded)."""
    p = _Parser(source)
    if data is None:
        data = {}
    top = p.mapping("", data, _TOP_KEYS)
    clusters_raw = top.get("clusters") or []
    if not isinstance(clusters_raw, list):
        raise p.err("clusters", "expected a list of cluster mappings")
    clusters = tuple(p.cluster(f"clusters[{i}]", c) for i, c in enumerate(clusters_raw))
    names = [c.name for c in clusters]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise p.err("clusters", f"duplicate cluster name {sorted(dupes)[0]!r}")
    level = str(top.get("log_level", "INFO")).upper()
    if level not in LOG_LEVELS:
        raise p.err("log_level", f"must be DEBUG, INFO, WARNING or ERROR, got {level!r}")
    fmt = str(top.get("log_format", "text")).lower()
    if fmt not in LOG_FORMATS:
        raise p.err("log_format", f"must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    http = p.http("http", top.get("http"))
    default_interval = WORKER_POLL_INTERVAL if http.worker_processes else IN_PROCESS_POLL_INTERVAL
    clusters = tuple(c if c.poll_interval_seconds is not None else replace(c, poll_interval_seconds=default_interval)
                     for c in clusters)
    label = _cluster_label(p, top.get("cluster_label", DEFAULT_CLUSTER_LABEL))
    return Config(clusters, http, level, source, fmt, label)


def _cluster_label(p: _Parser, value: Any) -> str:
    label = p.string("cluster_label", value)
    if not re.fullmatch(LABEL_NAME_RE, label) or label.startswith("__"):
        raise p.err("cluster_label", f"must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting "
                                     f"with __), got {label!r}")
    taken = _other_label_names().get(label)
    if taken:
        raise p.err("cluster_label", f"{label!r} is already a label of txnwatch's series ({taken}): "
                                     "choose another name")
    return label


def _other_label_names() -> dict[str, str]:
    """Label names txnwatch's series use besides the cluster's -> where (for the error)."""
    from .metrics import CATALOG  # lazily: it imports prometheus_client, which the CLI's start does not need

    out = {"le": "histogram buckets", "quantile": "summary quantiles"}
    for spec in CATALOG.values():
        for name in spec.labels:
            if name != "cluster":
                out.setdefault(name, f"e.g. {spec.name}")
    return out


def load_file(path: str | os.PathLike) -> Config:
    src = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {src}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError("(yaml)", f"not valid YAML{where}: {getattr(exc, 'problem', exc)}", src) from None
    return parse_config(data, src)


ENV_PREFIX = "TXNWATCH_"
# flag/env name -> (section, key)
OVERRIDES = {
    "config": None,
    "host": ("http", "host"), "port": ("http", "port"),
    "ingest_token": ("http", "ingest_token"),
    "bootstrap_servers": ("cluster", "bootstrap_servers"),
    "cluster_name": ("cluster", "name"),
    "poll_interval": ("cluster", "poll_interval_seconds"),
    "poll_timeout": ("cluster", "poll_timeout_seconds"),
    "transaction_log_tap": ("cluster", "transaction_log_tap"),
    "hanging_threshold": ("cluster", "hanging_threshold_seconds"),
    "log_level": ("top", "log_level"),
    "log_format": ("top", "log_format"),
}


def load_config(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                require_cluster: bool = True) -> Config:
    """Merge flags > TXNWATCH_* env > YAML file. Single-cluster flags and the flat variables
    (OVERRIDES) override (or add) the cluster named by --cluster-name (default: the only
    cluster in the file, else 'default'); the nested variables (TXNWATCH_HTTP__PORT,
    TXNWATCH_CLUSTERS__0__NAME: `_apply_env`) merge into the file's document key by key."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}     # key -> the variable or flag its value came from
    for key in OVERRIDES:
        ev = env.get(ENV_PREFIX + key.upper())
        if ev not in (None, ""):
            merged[key] = ev
            origin[key] = ENV_PREFIX + key.upper()
    merged.update(flags)
    origin.update({k: "--" + k.replace("_", "-") for k in flags})
    data: dict[str, Any] = {}
    if merged.get("config"):
        load_file(merged["config"])   # the file on its own first: its errors name the file
        data = yaml.safe_load(Path(merged["config"]).read_text()) or {}
    env_origin = _apply_env(data, env)
    try:
        return _load_merged(data, merged, require_cluster, bool(env_origin))
    except ConfigError as exc:
        came_from = _origin_of(exc.key, origin) or _env_origin_of(exc.key, env_origin)
        if came_from is None:
            raise
        raise ConfigError(exc.key, f"{exc.message} (set by {came_from})", exc.source) from None


def _origin_of(key_path: str, origin: Mapping[str, str]) -> str | None:
    """The flat environment variable or flag that set the setting at `key_path` (a
    ConfigError's dotted path), if one did."""
    for key, where in origin.items():
        target = OVERRIDES.get(key)
        if target is None:
            continue
        section, name = target
        if (section == "http" and key_path == f"http.{name}") or (section == "top" and key_path == name) or \
                (section == "cluster" and re.fullmatch(rf"clusters\[\d+\]\.{re.escape(name)}", key_path)):
            return where
    return None


def _env_origin_of(key_path: str, env_origin: Mapping[str, str]) -> str | None:
    """The nested variable that set `key_path`, or the mapping or list item it lies in;
    else the variables that set something under it (a duplicate cluster name, half of
    basic auth)."""
    own = [p for p in env_origin if key_path == p or key_path.startswith((p + ".", p + "["))]
    if own:
        return env_origin[max(own, key=len)]
    return ", ".join(sorted({v for p, v in env_origin.items()
                             if p.startswith((key_path + ".", key_path + "["))})) or None


# librdkafka's property names use dots, so a variable's underscores become dots; but for these two
# (CONFIGURATION.md: its other names with underscores are callbacks, not settable as text).
_UNDERSCORE_PROPERTIES = frozenset({"log_level", "enabled_events"})
_BOOL_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """Merge the nested variables into `data` (the file's document): each level's key upper-cased,
    `__` between levels, list items by index (TXNWATCH_CLUSTERS__0__CLIENT__SASL_PASSWORD), and
    the top-level keys not in OVERRIDES (TXNWATCH_CLUSTER_LABEL). Returns dotted key path ->
    variable, for errors. Shallower variables go first, so TXNWATCH_CLUSTERS__0__NAME refines
    TXNWATCH_CLUSTERS='[...]', and indexes in numeric order, so each new item is the next one."""
    todo = []
    for var, value in env.items():
        rest = var[len(ENV_PREFIX):]
        if not var.startswith(ENV_PREFIX) or value == "" or rest.lower() in OVERRIDES:
            continue
        if "__" in rest or rest.lower() in ROOT.names:   # no `__`: not a key (TXNWATCH_SHARD, ...)
            parts = rest.split("__")
            order = [(0, int(p), "") if _is_index(p) else (1, 0, p.lower()) for p in parts]
            todo.append((len(parts), order, var, parts, value))
    origin: dict[str, str] = {}
    for _, _, var, parts, value in sorted(todo):
        for path in _set_from_env(data, parts, value, var):
            origin.setdefault(path, var)
    return origin


def _is_index(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _set_from_env(doc: dict[str, Any], parts: list[str], value: str, var: str) -> list[str]:
    """Set the key `parts` names; returns the dotted paths set or created (a list item)."""
    def fail(path: str, message: str) -> ConfigError:
        return ConfigError(path or var, f"{message} (set by {var})", "environment")

    key, node, path, made = ROOT, doc, "", []
    for i, raw in enumerate(parts):
        name = raw.lower()
        slot: str | int
        if key.values is not None:                   # client: librdkafka properties
            slot = name if name in _UNDERSCORE_PROPERTIES else name.replace("_", ".")
            child, sub = None, f"{path}.{slot}"
        elif key.object_list:                        # clusters, app_rules: an index
            if not _is_index(raw):
                raise fail(path, f"{raw!r} is not a list index (the items are numbered from 0)")
            slot, child, sub = int(raw), key.items, f"{path}[{int(raw)}]"
            if slot > len(node):
                raise fail(path, f"index {slot} is past the end: there are {len(node)} item(s), so the next "
                                 f"one is {len(node)}")
            if slot == len(node):
                node.append({})
                made.append(sub)
        elif name in key.names:
            slot, child, sub = name, key.child(name), f"{path}.{name}" if path else name
        else:
            raise fail(f"{path}.{name}" if path else name, f"unknown key (allowed: {', '.join(sorted(key.names))})")
        if i == len(parts) - 1:
            node[slot] = value if child is None else _env_value(child, value, sub, fail)
            return made + [sub]
        if child is None or not (child.children or child.object_list or child.values is not None):
            raise fail(sub, "takes a single value: no key may follow it in the variable's name")
        cur = node[slot] if isinstance(node, list) else node.get(slot)
        want = list if child.object_list else dict
        if cur is None:
            cur = want()
        elif isinstance(cur, bool) and want is dict:
            cur = {"enabled": cur}                   # `canary: true` in the file
        elif not isinstance(cur, want):
            raise fail(sub, f"holds a {type(cur).__name__}, so no key can be set under it")
        node[slot] = cur
        key, node, path = child, cur, sub
    raise AssertionError("unreachable")


def _env_value(key: Key, value: str, path: str, fail) -> Any:
    """A variable's text as `key` takes it: a list or mapping as JSON (or YAML flow) text where
    the key takes one; anything else as the string, which the parser reads as it reads the file's
    strings (numbers, booleans; a plain string where a list of regexes goes is one item)."""
    text = value.strip()
    if {"array", "object"} & set(key.type) and text[:1] in ("[", "{"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise fail(path, f"not valid JSON (or YAML flow) text: {getattr(exc, 'problem', exc)}") from None
    if "object" in key.type and "boolean" in key.type and text.lower() in _BOOL_WORDS:
        return _BOOL_WORDS[text.lower()]             # canary: true
    return value


def _load_merged(data: dict[str, Any], merged: dict[str, Any], require_cluster: bool,
                 from_env: bool) -> Config:
    source = str(merged["config"]) if merged.get("config") else None
    data = dict(data)
    raw = data.get("clusters")
    if raw is None or isinstance(raw, list):         # else the parser names the bad value
        clusters = [dict(c) if isinstance(c, dict) else c for c in raw or []]
        cluster_over = {OVERRIDES[k][1]: v for k, v in merged.items()
                        if OVERRIDES.get(k) and OVERRIDES[k][0] == "cluster"}
        if cluster_over:
            only = clusters[0] if len(clusters) == 1 and isinstance(clusters[0], dict) else {}
            name = cluster_over.get("name") or only.get("name") or "default"
            cluster_over["name"] = name
            target = next((c for c in clusters if isinstance(c, dict) and c.get("name") == name), None)
            if target is None:
                clusters.append(cluster_over)
            else:
                target.update(cluster_over)
        if clusters or "clusters" in data:
            data["clusters"] = clusters
    http = dict(data.get("http") or {}) if isinstance(data.get("http") or {}, dict) else data.get("http")
    for k, v in merged.items():
        if OVERRIDES.get(k) and OVERRIDES[k][0] == "http" and isinstance(http, dict):
            http[OVERRIDES[k][1]] = v
    if http:
        data["http"] = http
    for key in ("log_level", "log_format"):
        if key in merged:
            data[key] = merged[key]
    cfg = parse_config(data, source or ("flags/environment" if merged or from_env else None))
    if require_cluster and not cfg.clusters:
        raise ConfigError("clusters", "no cluster configured: pass --bootstrap-servers or a --config "
                          "file with a `clusters:` list", source)
    return cfg


def with_cluster(cfg: Config, cluster: ClusterConfig) -> Config:
    return replace(cfg, clusters=(cluster,))
