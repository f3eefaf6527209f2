"""The exporter's configuration: flags > TXNWATCH_* environment > YAML file > defaults.

- schema.py: every key declared once (type, default, description, secret); the parser's key
  sets, the environment mapping and the JSON Schema come from it;
- model.py: the configuration as immutable values, ConfigError, secret references;
- parse.py: a YAML document to a Config, each error naming the key's dotted path and file;
- env.py: flags and environment merged over the file (`load_config`);
- listen.py: listen addresses and the telemetry path (syntax, clashes, the two spellings).
"""

from .env import ENV_PREFIX, OVERRIDES, load_config, with_cluster
from .model import (
    IN_PROCESS_POLL_INTERVAL,
    SECRET_KEY_RE,
    WORKER_POLL_INTERVAL,
    CanaryConfig,
    ClusterConfig,
    Config,
    ConfigError,
    HttpConfig,
    ListenAddress,
    NameFilter,
    Origin,
    redacted,
    resolve_secret,
)
from .parse import load_file, parse_config
from .schema import DEFAULT_PORT, LOG_FORMATS

__all__ = ["DEFAULT_PORT", "ENV_PREFIX", "IN_PROCESS_POLL_INTERVAL", "LOG_FORMATS", "OVERRIDES", "SECRET_KEY_RE",
           "WORKER_POLL_INTERVAL", "CanaryConfig", "ClusterConfig", "Config", "ConfigError", "HttpConfig",
           "ListenAddress", "NameFilter", "Origin", "load_config", "load_file", "parse_config", "redacted",
           "resolve_secret", "with_cluster"]
