"""A YAML document (already loaded) to a Config: every key checked against the one
declaration (txnwatch.config.schema), every error a ConfigError naming the key's dotted path
and the file."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ..apps import KNOWN_SCHEMES, AppRule
from ..metrics import CATALOG, DEFAULT_CLUSTER_LABEL
from .listen import check_telemetry_path, clash, parse_address, parse_host, split_addresses
from .model import (
    _REF_RE,
    IN_PROCESS_POLL_INTERVAL,
    WORKER_POLL_INTERVAL,
    CanaryConfig,
    ClusterConfig,
    Config,
    ConfigError,
    HttpConfig,
    ListenAddress,
    NameFilter,
    Origin,
    resolve_secret,
)
from .schema import DEFAULT_PORT, GRANULARITIES, LABEL_NAME_RE, LOG_FORMATS, LOG_LEVELS, POLL_SCHEDULES, ROOT
from .web import WebConfigError, load_web_config

# The parser's key sets, from the one declaration (txnwatch.config.schema).
_TOP_KEYS = ROOT.names
_HTTP_KEYS = ROOT.child("http").names
_AUTH_KEYS = ROOT.child("http").child("auth").names
_CLUSTER_KEYS = ROOT.child("clusters").items.names
_CANARY_KEYS = ROOT.child("clusters").items.child("canary").names
_FILTER_KEYS = ROOT.child("clusters").items.child("topics").names
_APP_RULE_KEYS = ROOT.child("clusters").items.child("app_rules").items.names

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

    def strings(self, key: str, value: Any) -> tuple[str, ...]:
        """A list of strings; one string is a list of one, as for the name filters (the
        environment gives a list as JSON text: config/env.py)."""
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.err(key, f"expected a list of names, got {type(value).__name__}")
        return tuple(self.string(f"{key}[{i}]", item) for i, item in enumerate(value))

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
        for num in ("poll_interval_seconds", "poll_idle_interval_seconds", "poll_timeout_seconds",
                    "hanging_threshold_seconds", "two_phase_commit_max_age_seconds",
                    "series_linger_seconds", "series_group_still_seconds"):
            if v.get(num) is not None:
                kw[num] = self.number(f"{key}.{num}", v[num])
        if v.get("poll_schedule") is not None:
            sched = self.string(f"{key}.poll_schedule", v["poll_schedule"])
            if sched not in POLL_SCHEDULES:
                raise self.err(f"{key}.poll_schedule", f"must be {' or '.join(POLL_SCHEDULES)}, got {sched!r}: "
                                                       "scrapes times each poll to the scrapes, interval polls "
                                                       "back to back from poll_interval_seconds")
            kw["poll_schedule"] = sched
        elif "poll_interval_seconds" in kw:
            kw["poll_schedule"] = "interval"     # a configured interval wins
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
            if g not in GRANULARITIES:
                raise self.err(f"{key}.granularity", f"must be signal, partition or topic, got {g!r}: signal keeps "
                               "a partition's own series while it carries a signal, partition keeps every "
                               "partition's, topic sums each topic's")
            kw["granularity"] = g
        if v.get("series_apps") is not None:
            kw["series_apps"] = self.strings(f"{key}.series_apps", v["series_apps"])
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
        if isinstance(value, dict) and value.get("tls") is not None:
            raise self.err(f"{key}.tls", "moved to the web configuration file (http.web_config_file, "
                           "--web.config.file): tls_server_config: {cert_file: ..., key_file: ...}")
        if isinstance(value, dict) and isinstance(value.get("auth"), dict) and (
                {"username", "password"} & set(value["auth"])):
            raise self.err(f"{key}.auth", "basic-auth users moved to the web configuration file "
                           "(http.web_config_file, --web.config.file) as bcrypt hashes: "
                           "basic_auth_users: {prometheus: $2y$10$...} (htpasswd -nBC 10 prometheus)")
        v = self.mapping(key, value, _HTTP_KEYS)
        kw: dict[str, Any] = self.listen(key, v)
        if v.get("telemetry_path") is not None:
            try:
                kw["telemetry_path"] = check_telemetry_path(self.string(f"{key}.telemetry_path", v["telemetry_path"]))
            except ValueError as exc:
                raise self.err(f"{key}.telemetry_path", str(exc)) from None
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
            if not a.get("bearer_token"):
                raise self.err(f"{key}.auth", "set bearer_token (basic-auth users are in the web configuration file)")
            kw["auth_bearer_token"] = resolve_secret(self.string(f"{key}.auth.bearer_token", a["bearer_token"]))
        if v.get("web_config_file") is not None:
            path = self.string(f"{key}.web_config_file", v["web_config_file"])
            try:
                kw["web"] = load_web_config(path)
            except WebConfigError as exc:
                raise self.err(f"{key}.web_config_file", str(exc)) from None
            kw["web_config_file"] = path
        return HttpConfig(**kw)


    def listen(self, key: str, v: dict) -> dict[str, Any]:
        """HttpConfig's host, port, listen_addresses and `listen` (each address with the key
        that set it) from the http mapping `v`."""
        single = [k for k in ("host", "port") if k in v]
        if single and v.get("listen_addresses") is not None:
            raise self.err(f"{key}.listen_addresses", f"{' and '.join(f'{key}.{k}' for k in single)} and "
                           f"{key}.listen_addresses both set the listen address: keep one (host and port for one "
                           "address, listen_addresses for any number)")
        if v.get("listen_addresses") is not None:
            return self.listen_addresses(f"{key}.listen_addresses", v["listen_addresses"])
        kw: dict[str, Any] = {}
        if "host" in v:
            try:
                kw["host"] = parse_host(self.string(f"{key}.host", v["host"]))
            except ValueError as exc:
                raise self.err(f"{key}.host", str(exc)) from None
        if "port" in v:
            kw["port"] = _port(self, f"{key}.port", v["port"])
        kw["listen"] = (ListenAddress(kw.get("host", ""), kw.get("port", DEFAULT_PORT),
                                      Origin(f"{key}.host", default="host" not in v),
                                      Origin(f"{key}.port", default="port" not in v)),)
        return kw

    def listen_addresses(self, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, list | tuple | str):
            raise self.err(key, f"expected a list of addresses (host:port, [v6addr]:port, :port), got "
                                f"{type(value).__name__}")
        texts = [self.string(f"{key}[{i}]", a) for i, a in enumerate(split_addresses(value))]
        if not texts:
            raise self.err(key, "is empty: give at least one address (host:port, [v6addr]:port, or :port for "
                                "every interface), or leave it out for the default")
        parsed = []
        for i, text in enumerate(texts):
            try:
                parsed.append(parse_address(text))
            except ValueError as exc:
                raise self.err(f"{key}[{i}]", str(exc)) from None
        bad = clash(parsed)
        if bad is not None:
            i, j, wide = bad
            raise self.err(f"{key}[{j}]", f"{texts[j]!r} is given twice: give each address once" if wide is None
                           else f"{texts[j]!r} and {texts[i]!r} share port {parsed[j][1]}, where one of them takes "
                                f"{wide}: on one port give either every interface or specific addresses")
        listen = tuple(ListenAddress(h, p, Origin(f"{key}[{i}]"), Origin(f"{key}[{i}]"))
                       for i, (h, p) in enumerate(parsed))
        return {"listen_addresses": tuple(texts), "listen": listen}


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


