"""Where the configuration comes from: flags > TXNWATCH_* environment > YAML file > defaults.
The flat single-cluster variables (OVERRIDES) and, for every key of the declaration, the
nested ones (TXNWATCH_HTTP__PORT, TXNWATCH_CLUSTERS__0__NAME); errors name the flag or the
variable that set the bad value."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from .listen import MANY, SINGLE, deciding_layer
from .model import ClusterConfig, Config, ConfigError, Origin
from .parse import load_file, parse_config
from .schema import ROOT, Key

ENV_PREFIX = "TXNWATCH_"
# flag/env name -> (section, key); each is a flag's dest and, upper-cased, a flat variable
OVERRIDES = {
    "config": None,
    "host": ("http", "host"), "port": ("http", "port"),
    "web_listen_address": ("http", "listen_addresses"),
    "web_telemetry_path": ("http", "telemetry_path"),
    "ingest_token": ("http", "ingest_token"),
    "web_config_file": ("http", "web_config_file"),
    "bootstrap_servers": ("cluster", "bootstrap_servers"),
    "cluster_name": ("cluster", "name"),
    "poll_interval": ("cluster", "poll_interval_seconds"),
    "poll_timeout": ("cluster", "poll_timeout_seconds"),
    "transaction_log_tap": ("cluster", "transaction_log_tap"),
    "hanging_threshold": ("cluster", "hanging_threshold_seconds"),
    "log_level": ("top", "log_level"),
    "log_format": ("top", "log_format"),
}
# flags spelled other than "--" + dest with dashes (the CLI tells which alias was given)
FLAG_NAMES = {"web_listen_address": "--web.listen-address", "web_telemetry_path": "--web.telemetry-path",
              "web_config_file": "--web.config.file"}
LISTEN_OVERRIDES = ("host", "port", "web_listen_address")
LISTEN_KEYS = ("host", "port", "listen_addresses")


def load_config(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                require_cluster: bool = True, flag_names: Mapping[str, str] | None = None) -> Config:
    """Merge flags > TXNWATCH_* env > YAML file. Single-cluster flags and the flat variables
    (OVERRIDES) override (or add) the cluster named by --cluster-name (default: the only
    cluster in the file, else 'default'); the nested variables (TXNWATCH_HTTP__PORT,
    TXNWATCH_CLUSTERS__0__NAME: `_apply_env`) merge into the file's document key by key.
    `flag_names`: each flag's dest -> the option string given (errors name it as typed)."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = os.environ if env is None else env
    flat = {k: env[ENV_PREFIX + k.upper()] for k in OVERRIDES if env.get(ENV_PREFIX + k.upper()) not in (None, "")}
    merged: dict[str, Any] = {**flat, **flags}
    origin = {k: ENV_PREFIX + k.upper() for k in flat}     # key -> the variable or flag its value came from
    origin.update({k: {**FLAG_NAMES, **(flag_names or {})}.get(k) or "--" + k.replace("_", "-") for k in flags})
    data: dict[str, Any] = {}
    if merged.get("config"):
        try:                          # the file on its own first: its errors name the file
            load_file(merged["config"])
        except ConfigError as exc:
            if exc.key != "--config":
                raise
            raise ConfigError(origin["config"], exc.message) from None
        data = yaml.safe_load(Path(merged["config"]).read_text()) or {}
    file_http = set(data["http"]) & set(LISTEN_KEYS) if isinstance(data.get("http"), dict) else set()
    env_origin = _apply_env(data, env)
    _settle_listen(data, merged, origin, env_origin, file_http, set(flags))
    try:
        return _name_listen(_load_merged(data, merged, require_cluster, bool(env_origin)), origin, env_origin)
    except ConfigError as exc:
        came_from = _origin_of(exc.key, origin) or _env_origin_of(exc.key, env_origin)
        if came_from is None:
            raise
        raise ConfigError(exc.key, f"{exc.message} (set by {came_from})", exc.source) from None


def _settle_listen(data: dict[str, Any], merged: dict[str, Any], origin: Mapping[str, str],
                   env_origin: Mapping[str, str], file_keys: set[str], flag_keys: set[str]) -> None:
    """The listen address is one setting spelled two ways (host and port, or listen_addresses:
    config/listen.py): the highest layer setting either decides, so the other spelling is
    dropped from every layer before the parser sees them; one layer setting both is an error."""
    http = data["http"] if isinstance(data.get("http"), dict) else {}
    by_env = {k: env_origin.get(f"http.{k}") or env_origin["http"] for k in LISTEN_KEYS
              if k in http and (f"http.{k}" in env_origin or "http" in env_origin)}
    layers = [{OVERRIDES[k][1]: origin[k] for k in LISTEN_OVERRIDES if k in merged and k in flag_keys},
              {**by_env, **{OVERRIDES[k][1]: origin[k] for k in LISTEN_OVERRIDES if k in merged and k not in flag_keys}},
              {k: f"http.{k}" for k in file_keys if k in http and k not in by_env}]
    try:
        decides = deciding_layer(layers)
    except ValueError as exc:
        raise ConfigError("http.listen_addresses", str(exc), "flags/environment") from None
    many = decides is not None and MANY in layers[decides]
    for key in (SINGLE if many else (MANY,)):
        http.pop(key, None)
    for key in (("host", "port") if many else ("web_listen_address",)):
        merged.pop(key, None)


def _name_listen(cfg: Config, origin: Mapping[str, str], env_origin: Mapping[str, str]) -> Config:
    """The listen addresses with the flag or variable that set each (their errors come at bind)."""
    def named(o: Origin) -> Origin:
        return o if o.default else replace(o, set_by=_origin_of(o.key, origin) or _env_origin_of(o.key, env_origin))

    listen = tuple(replace(a, host_origin=named(a.host_origin), port_origin=named(a.port_origin))
                   for a in cfg.http.listen)
    return replace(cfg, http=replace(cfg.http, listen=listen))


def _origin_of(key_path: str, origin: Mapping[str, str]) -> str | None:
    """The flat environment variable or flag that set the setting at `key_path` (a
    ConfigError's dotted path), if one did."""
    for key, where in origin.items():
        target = OVERRIDES.get(key)
        if target is None:
            continue
        section, name = target
        if (section == "http" and re.fullmatch(rf"http\.{name}(\[\d+\])?", key_path)) or (section == "top" and key_path == name) or \
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
    strings (numbers, booleans; a plain string where a list of regexes goes is one item). Text
    starting with `[` that is not a list is the string where the key takes one."""
    text = value.strip()
    if {"array", "object"} & set(key.type) and text[:1] in ("[", "{"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            if "string" in key.type:       # a key that takes a string too: `[::1]:9000` is an address
                return value
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

