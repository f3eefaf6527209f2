"""Every key of the configuration file, declared once, as data.

From this declaration come the parser's key sets (txnwatch.config), the mapping of
TXNWATCH_A__B__0__C environment variables onto keys, and the JSON Schema checked in as
schema/txnwatch-config.schema.json (`make schema`, which runs `txnwatch config-schema`;
tests/unit/test_config_env.py fails when the file and this module drift). The parser
(txnwatch.config) still does the validation: its errors name the dotted key path and the
file or variable a value came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..apps import KNOWN_SCHEMES
from ..metrics import DEFAULT_CLUSTER_LABEL

DEFAULT_PORT = 10129  # 9100-9999 (Prometheus's exporter range) is fully allocated.
LOG_FORMATS = ("text", "json", "logfmt")     # logsetup.FORMATS has a formatter for each
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
POLL_SCHEDULES = ("scrapes", "interval")
# the per-partition families' series (exporter/poll/granularity.py)
GRANULARITIES = ("signal", "partition", "topic")
LABEL_NAME_RE = r"^[a-zA-Z_][a-zA-Z0-9_]*$"   # Prometheus's; names starting with __ are reserved
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schema" / "txnwatch-config.schema.json"
NONE = object()   # "no default" / "no example"


@dataclass(frozen=True)
class Key:
    """One key of the file. `children`: a mapping's keys (no others allowed); `items`: what a
    list holds; `values`: a free-form mapping's value types (librdkafka properties)."""

    name: str
    type: tuple[str, ...]            # JSON types; "null" is added when `nullable`
    description: str
    default: Any = NONE
    example: Any = NONE              # a valid non-default value (the tests set it from the environment)
    nullable: bool = False           # the parser takes null as "the default"
    secret: bool = False             # never logged or shown (Config.secret_values)
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    enum: tuple | None = None
    pattern: str | None = None
    children: tuple[Key, ...] = ()
    items: Key | None = None
    values: tuple[str, ...] | None = None
    required: tuple[str, ...] = ()
    extra: tuple[tuple[str, Any], ...] = ()   # schema-only constraints the parser checks in code

    @property
    def names(self) -> frozenset[str]:
        return frozenset(c.name for c in self.children)

    def child(self, name: str) -> Key:
        return next(c for c in self.children if c.name == name)

    @property
    def object_list(self) -> bool:
        """A list of mappings (clusters, app_rules): the environment addresses its items by index."""
        return self.items is not None and bool(self.items.children)


def _str(name: str, description: str, default: Any = NONE, **kw: Any) -> Key:
    return Key(name, ("string",), description, default, **kw)


def _bool(name: str, description: str, default: bool, **kw: Any) -> Key:
    return Key(name, ("boolean",), description, default, **kw)


def _num(name: str, description: str, default: Any = NONE, integer: bool = False, **kw: Any) -> Key:
    return Key(name, ("integer",) if integer else ("number",), description, default, **kw)


_REGEX = _str("regex", "a regular expression (Python re syntax)")


def _filter(name: str, what: str, exclude: tuple[str, ...] = ()) -> Key:
    def part(p: str, default: list, example: list) -> Key:
        return Key(p, ("array", "string"), f"regular expressions (full match); a single string is one; {what}",
                   default, example, nullable=True, items=_REGEX)

    return Key(name, ("object",), f"which {name.replace('_', ' ')} are followed: include (empty: all), then exclude",
               nullable=True, children=(part("include", [], ["orders.*", "payments"]),
                                        part("exclude", list(exclude), ["tmp.*"])))


CANARY = Key(
    "canary", ("boolean", "object"),
    "the transactional canary: true for every default, or a mapping of settings; off when absent",
    False, nullable=True, children=(
        _bool("enabled", "with a mapping: false turns the canary off", True, example=False),
        _num("interval_seconds", "one transaction per interval; each step's deadline within it", 10.0,
             exclusive_minimum=0, nullable=True, example=5.0),
        _num("abort_every", "every Nth round is aborted on purpose (0: never)", 10, integer=True,
             minimum=0, example=0),
        _str("topic", "the canary topic (one partition per broker)", "__txnwatch_canary", nullable=True,
             example="ops.canary"),
        _bool("create_topic", "create the topic when missing (needs Create on it)", True, example=False),
        _num("replication_factor", "of a created topic; null: min(3, brokers)", None, integer=True,
             exclusive_minimum=0, nullable=True, example=2),
        _num("visibility_timeout_seconds", "null: the interval", None, exclusive_minimum=0, nullable=True,
             example=3.0),
        _str("instance", "in the transactional id; null: the host (pod) name", None, nullable=True,
             example="pod-0"),
    ))

APP_RULE = Key(
    "app rule", ("object",), "transactional ids matching `match` belong to app `app`",
    required=("match", "app"), children=(
        _str("match", "regular expression searched in the transactional id", example="^(orders)-"),
        _str("app", "the app's name: a template (\\1, \\g<name>)", example="\\1-app"),
        _str("scheme", "the id scheme of the framework that writes these ids", enum=tuple(sorted(KNOWN_SCHEMES)),
             example="kafka-streams-eos-v2"),
    ))

CLUSTER = Key(
    "cluster", ("object",), "one Kafka cluster", required=("name", "bootstrap_servers"), children=(
        _str("name", "the cluster's name: the value of the cluster label on its series", example="orders"),
        Key("bootstrap_servers", ("string", "array"), "bootstrap servers: comma-separated, or a list",
            example="k1:9092,k2:9092", items=_str("server", "host:port")),
        _num("poll_interval_seconds", "minimum seconds between poll starts; default 1 with worker processes "
             "(back to back), 15 without; setting it makes poll_schedule interval unless that is set",
             exclusive_minimum=0, nullable=True, example=2.5),
        _str("poll_schedule", "scrapes: each poll timed to be done just before the next scrape (cadences "
             "learnt from the scrapes); interval: back to back from poll_interval_seconds. Default: scrapes, or "
             "interval when poll_interval_seconds is set", enum=POLL_SCHEDULES, nullable=True, example="interval"),
        _num("poll_idle_interval_seconds", "seconds between polls while nobody scrapes (poll_schedule scrapes)",
             60.0, exclusive_minimum=0, nullable=True, example=120),
        _num("poll_duty_cycle", "at most this share of wall time spent polling", 0.5, exclusive_minimum=0,
             maximum=1, nullable=True, example=0.25),
        _num("poll_timeout_seconds", "bound on each poll step's requests", 10.0, exclusive_minimum=0,
             nullable=True, example=5.0),
        _num("open_transaction_min_age_seconds", "KIP-994 brokers (3.8+): list only transactions open at least "
             "this long (0: all)", 0.0, minimum=0, nullable=True, example=30.0),
        Key("client", ("object",), "librdkafka properties (SASL, SSL...), passed through; a value may be "
            "${env:NAME} or ${file:/path}", nullable=True, values=("string", "number", "boolean"),
            example={"sasl.username": "svc"},
            extra=(("propertyNames", {"not": {"const": "bootstrap.servers"}}),)),
        _filter("topics", "default excludes internal topics", exclude=("__.*",)),
        _filter("groups", "consumer groups"),
        _filter("transactional_ids", "KIP-1152 brokers (4.1+) filter the listing by these"),
        Key("app_rules", ("array",), "transactional id -> app rules, tried before the built-in ones", [],
            nullable=True, items=APP_RULE),
        _num("max_transactional_id_series", "per-transactional-id series at most", 500, integer=True,
             exclusive_minimum=0, example=100),
        _str("granularity", "which partitions keep series of their own. signal: a partition while it carries a "
             "signal (open transaction, stalled LSO, hanging, a read_committed group behind it without a commit for "
             "series_group_still_seconds, a series_apps app) and series_linger_seconds after, the rest summed per "
             "topic (partition=\"__other__\"); partition: every one; topic: none, summed per topic "
             "(partition=\"all\"). At signal and topic an open transaction keeps per-id series only while it "
             "carries a signal (half its timeout used, 10 s or less left, a timeout above the broker's cap, a "
             "series_apps app) and its id series_linger_seconds after, the rest per app "
             "(transactional_id=\"__other__\")", "signal", enum=GRANULARITIES, example="topic"),
        Key("series_apps", ("array", "string"), "granularity signal: apps whose transactions' partitions "
            "and ids and whose groups (a group named as the app) always keep their own series", [], ["orders-etl"],
            nullable=True, items=_str("app", "an app label value")),
        _num("series_linger_seconds", "granularity signal: how long a partition or transactional id keeps its "
             "own series after its last signal", 3600.0, exclusive_minimum=0, nullable=True, example=7200),
        _num("series_group_still_seconds", "granularity signal: a read_committed group behind its LSO "
             "without a commit this long is a signal on its partition (a consumer that keeps up commits sooner: "
             "Kafka's auto-commit every 5 s, Flink at each checkpoint)", 120.0, exclusive_minimum=0, nullable=True,
             example=600),
        _bool("transaction_log_tap", "also tap __transaction_state (needs Read on it)", False, example=True),
        _num("hanging_threshold_seconds", "without KIP-664: an LSO stalled this long counts as hanging; null: "
             "the broker's transaction.max.timeout.ms + 300 s, else 20 min", None, exclusive_minimum=0,
             nullable=True, example=600.0),
        _num("two_phase_commit_max_age_seconds", "KIP-939 transactions (never timed out): a finding once one "
             "is open longer", 3600.0, exclusive_minimum=0, nullable=True, example=7200.0),
        _num("default_transaction_max_timeout_ms", "when DescribeConfigs returns nothing", 900_000, integer=True,
             exclusive_minimum=0, example=60_000),
        _num("default_transactional_id_expiration_ms", "when DescribeConfigs returns nothing", 604_800_000,
             integer=True, exclusive_minimum=0, example=86_400_000),
        _num("describe_configs_every", "polls between DescribeConfigs refreshes", 20, integer=True,
             exclusive_minimum=0, example=5),
        CANARY,
    ))

HTTP = Key(
    "http", ("object",), "the HTTP server (/metrics, /, probes, the Spark ingest)", nullable=True,
    extra=(("not", {"anyOf": [{"required": ["listen_addresses", "host"]},
                              {"required": ["listen_addresses", "port"]}]}),), children=(
        _str("host", "listen host (one address, with port); default every interface: [::] with IPv4 mapped, "
             "0.0.0.0 where the host has no IPv6", example="127.0.0.1"),
        _num("port", "listen port (one address, with host)", DEFAULT_PORT, integer=True, minimum=1, maximum=65535,
             example=8080),
        Key("listen_addresses", ("array", "string"), "addresses to listen on, instead of host and port (not with "
            "them): host:port, [v6addr]:port, or :port for every interface; a string is comma-separated",
            nullable=True, example=["127.0.0.1:8080", "[::1]:8080"],
            items=_str("address", "host:port, [v6addr]:port or :port")),
        _str("telemetry_path", "the path of the metrics (Prometheus's metrics_path)", "/metrics", pattern="^/",
             example="/txnwatch/metrics"),
        _num("threads", "HTTP server (cheroot) worker threads", 8, integer=True, exclusive_minimum=0, example=4),
        _str("ingest_token", "bearer token for POST /api/v1/spark/events; may be ${env:NAME} or ${file:/path}",
             nullable=True, secret=True, example="ingest-token-1"),
        _num("ingest_max_bytes", "request size limit for the Spark ingest", 1_000_000, integer=True,
             exclusive_minimum=0, example=2048),
        _num("spark_query_ttl_seconds", "Spark queries that stop reporting expire after this", 600.0,
             exclusive_minimum=0, example=60.0),
        _bool("worker_processes", "each cluster's poller and tap in a process of its own", True, example=False),
        _str("web_config_file", "the web configuration file of Prometheus's exporters (exporter-toolkit's "
             "format): TLS with client certificates (re-read when they change), bcrypt-hashed basic-auth "
             "users, response headers; paths in it are relative to it", nullable=True,
             example="/etc/txnwatch/web-config.yml"),
        Key("auth", ("object",), "a bearer token for /metrics and / (probes stay open); basic-auth users are "
            "in the web configuration file", nullable=True, extra=(("minProperties", 1),),
            children=(_str("bearer_token", "bearer token; may be ${env:NAME} or ${file:/path}", secret=True,
                           example="scrape-token-1"),)),
    ))

ROOT = Key(
    "txnwatch configuration", ("object",), "The txnwatch exporter's configuration file", children=(
        Key("clusters", ("array",), "the Kafka clusters to watch", nullable=True, items=CLUSTER),
        HTTP,
        _str("log_level", "DEBUG, INFO, WARNING or ERROR", "INFO", enum=LOG_LEVELS, example="DEBUG"),
        _str("log_format", "log lines as text, json or logfmt", "text", enum=LOG_FORMATS, example="json"),
        _str("cluster_label", "name of the label carrying the cluster's name on every Kafka-side series; not "
             "one of the other label names of txnwatch's series (checked when loading)", DEFAULT_CLUSTER_LABEL,
             pattern=LABEL_NAME_RE, extra=(("not", {"pattern": "^__"}),), example="kafka"),
    ))


def leaves(key: Key | None = None, path: str = ""):
    """(path, Key) of every settable value: `clusters[].canary.interval_seconds`; a free-form
    mapping (`clusters[].client`) is one leaf."""
    for c in (key or ROOT).children:
        p = f"{path}.{c.name}" if path else c.name
        if c.children:
            yield from leaves(c, p)
        elif c.object_list:
            yield from leaves(c.items, p + "[]")
        else:
            yield p, c


def _schema(k: Key) -> dict[str, Any]:
    types = list(k.type) + (["null"] if k.nullable else [])
    out: dict[str, Any] = {"description": k.description, "type": types[0] if len(types) == 1 else types}
    if k.default is not NONE:
        out["default"] = k.default
    if k.enum is not None:
        out["enum"] = list(k.enum) + ([None] if k.nullable else [])
    for attr, word in (("minimum", "minimum"), ("exclusive_minimum", "exclusiveMinimum"),
                       ("maximum", "maximum"), ("pattern", "pattern")):
        if getattr(k, attr) is not None:
            out[word] = getattr(k, attr)
    if "string" in k.type:
        out["minLength"] = 1          # the parser rejects empty strings
    if k.secret:
        out["writeOnly"] = True
    if k.children:
        out["properties"] = {c.name: _schema(c) for c in k.children}
        out["additionalProperties"] = False
    if k.values is not None:
        out["additionalProperties"] = {"type": list(k.values)}
    if k.required:
        out["required"] = list(k.required)
    if k.items is not None:
        out["items"] = _schema(k.items)
    out.update(k.extra)
    return out


def json_schema() -> dict[str, Any]:
    """The configuration file's JSON Schema (draft 2020-12), for editors and Helm values."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "txnwatch configuration",
            "$comment": "Generated from txnwatch/config/schema.py by `make schema`: do not edit.",
            **_schema(ROOT)}


def render() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
