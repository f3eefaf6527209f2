"""The `txnwatch` command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import describe_build
from .config import LOG_FORMATS, ConfigError, load_config
from .config.schema import render as render_schema


class _Flag(argparse.Action):
    """argparse's store (or, with nargs=0, store_const), remembering the option string given
    in `flag_names`, so that an error names the flag as typed: `--web.config.file` or its
    alias `--web-config-file`, `--hanging-threshold` (never its dest, hanging_threshold)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        names = getattr(namespace, "flag_names", None) or {}
        namespace.flag_names = {**names, self.dest: option_string}


class _RepeatedFlag(_Flag):
    """argparse's append, remembering the option string as _Flag does."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, [*(getattr(namespace, self.dest) or []), values], option_string)


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action=_Flag, metavar="FILE", help="YAML config file (any number of clusters)")
    p.add_argument("--bootstrap-servers", action=_Flag, metavar="LIST", help="bootstrap servers of a single cluster")
    p.add_argument("--cluster-name", action=_Flag, metavar="NAME", help="name of that cluster (default: 'default')")
    p.add_argument("--poll-timeout", action=_Flag, type=float, metavar="SECONDS",
                   help="bound on each poll's requests")
    p.add_argument("--hanging-threshold", action=_Flag, type=float, metavar="SECONDS",
                   help="without KIP-664: an LSO stalled this long counts as a hanging transaction "
                        "(default: broker transaction.max.timeout.ms + 5 min)")
    p.add_argument("--log-level", action=_Flag, choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--log-format", action=_Flag, choices=list(LOG_FORMATS),
                   help="log lines as text (default), json or logfmt")


MIXIN_CONFIG_HELP = ("YAML mapping of alert and dashboard settings (thresholds, for durations, selectors, "
                     "link bases, extra labels; docs/alerts.md); the same file for `alerts` and `dashboards`")


def mixin_config(path: str | None, **overrides: object):
    """The AlertConfig of `--config FILE` (a flat YAML mapping of its fields), with the
    flags' overrides; ValueError names the file and the key."""
    import yaml

    from .alerts.config import AlertConfig

    values: dict = {}
    if path:
        try:
            values = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a mapping of settings, got {type(values).__name__}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return AlertConfig.from_mapping(values)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path or 'flags'}: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="txnwatch", description="Monitoring for exactly-once Kafka pipelines.")
    parser.add_argument("--version", action="version", version=describe_build())
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the Prometheus exporter")
    _cluster_flags(serve)
    serve.add_argument("--web.listen-address", action=_RepeatedFlag, dest="web_listen_address",
                       metavar="ADDRESS", help="an address to listen on, host:port, [v6addr]:port or :port (every "
                                               "interface); repeat it for several (default :10129; not with "
                                               "--host/--port)")
    serve.add_argument("--web.telemetry-path", action=_Flag, dest="web_telemetry_path", metavar="PATH",
                       help="the path of the metrics (default /metrics)")
    serve.add_argument("--host", action=_Flag, help="listen host of a single address (default: every interface, "
                                                    "[::] with IPv4 mapped, or 0.0.0.0 without IPv6)")
    serve.add_argument("--port", action=_Flag, type=int, help="listen port of a single address (default 10129)")
    serve.add_argument("--poll-interval", action=_Flag, type=float, metavar="SECONDS",
                       help="poll every SECONDS at most, back to back (poll_schedule interval); unset, polls are "
                            "timed to the scrapes")
    serve.add_argument("--transaction-log-tap", action=_Flag, nargs=0, const=True, default=None,
                       help="also tap __transaction_state (needs read access to it)")
    serve.add_argument("--shard", metavar="N|auto", default=os.environ.get("TXNWATCH_SHARD"),
                       help="this replica's shard (0-based), or auto: the StatefulSet pod ordinal "
                            "($POD_NAME / $HOSTNAME ending in -N); default $TXNWATCH_SHARD")
    serve.add_argument("--total-shards", type=int, metavar="M",
                       help="replicas splitting the work (default 1, $TXNWATCH_TOTAL_SHARDS)")
    serve.add_argument("--web.config.file", "--web-config-file", action=_Flag, dest="web_config_file",
                       metavar="FILE", help="the web configuration file of Prometheus's exporters (TLS, client certificates, "
                            "bcrypt basic-auth users); $TXNWATCH_WEB_CONFIG_FILE")
    serve.add_argument("--check-config", action="store_true",
                       help="validate the configuration (flags, environment, file) and exit: 0 valid, "
                            "2 not; contacts no Kafka cluster")

    check = sub.add_parser("check", help="one-shot diagnosis: exit 0 healthy, 1 warnings, 2 critical")
    _cluster_flags(check)
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument("--canary", action="store_true",
                       help="also run one canary round per cluster: a transaction written, committed and read "
                            "back read_committed (writes to the canary topic; exit 2 when it fails)")
    check.add_argument("--sample-seconds", type=float, default=1.0,
                       help="time between the two samples that show whether an LSO moves")

    _abort_parser(sub)

    health = sub.add_parser("healthcheck", help="exit 0 when the exporter on this host answers /healthz "
                                                "(container HEALTHCHECK): where `serve` says it listens, else "
                                                "where the configuration says")
    health.add_argument("--config", action=_Flag, metavar="FILE",
                        help="YAML config file; with several exporters on the host, the one started with it")
    health.add_argument("--port", action=_Flag, type=int, help="listen port (default 10129), when no serving "
                                                                "process says where it listens")
    health.add_argument("--web.config.file", "--web-config-file", action=_Flag, dest="web_config_file",
                        metavar="FILE", help="the web configuration file")
    dash = sub.add_parser("dashboards", help="write the Grafana dashboards (JSON) and provisioning files")
    dash.add_argument("--out", required=True, metavar="DIR")
    dash.add_argument("--config", metavar="FILE", help=MIXIN_CONFIG_HELP)
    alerts = sub.add_parser("alerts", help="write the Prometheus rule file and a PrometheusRule manifest")
    alerts.add_argument("--out", required=True, metavar="DIR")
    alerts.add_argument("--config", metavar="FILE", help=MIXIN_CONFIG_HELP)
    alerts.add_argument("--cluster-selector", default=None, metavar="MATCHERS",
                        help='label matchers added to every rule, e.g. \'cluster=~"prod-.*"\'')
    sub.add_parser("config-schema", help="print the configuration file's JSON Schema "
                                         "(schema/txnwatch-config.schema.json)")
    pipeline = sub.add_parser("pipeline", help="run the reference exactly-once Spark pipeline", add_help=False)
    pipeline.add_argument("args", nargs=argparse.REMAINDER)
    return parser


ABORT_FLAGS = ("cluster", "hanging", "transactional_id", "partition", "app", "yes", "force_live", "force_2pc",
               "accept_data_loss", "output", "audit_log", "wait_seconds", "exporter")


def _abort_parser(sub) -> None:
    abort = sub.add_parser("abort", help="end the transactions that block read_committed readers: shows what it "
                                         "will do and exits unless --yes; exit 0 done, 1 refused or partial, 2 bad "
                                         "target", description="Abort open transactions by writing ABORT markers "
                                         "to their partitions (WriteTxnMarkers, as kafka-transactions.sh abort). "
                                         "A dry run by default; every action is recorded in the audit log.")
    _cluster_flags(abort)
    abort.add_argument("--cluster", metavar="NAME", help="the cluster to act on, when the configuration has several")
    what = abort.add_mutually_exclusive_group(required=True)
    what.add_argument("--hanging", action="store_true", help="the hanging transactions (the exporter's find-hanging)")
    what.add_argument("--transactional-id", metavar="ID", help="the open transaction of one transactional id")
    what.add_argument("--partition", metavar="TOPIC:N", help="the open transactions on one partition")
    what.add_argument("--app", metavar="NAME", help="every open transaction of one app (the `app` label: a Flink "
                                                    "sink's prefix, a Streams application.id, a Spark sink's name)")
    abort.add_argument("--yes", action="store_true", help="act: write the abort markers the dry run showed")
    abort.add_argument("--force-live", action="store_true",
                       help="also abort live transactions (open within their timeout at their coordinator)")
    abort.add_argument("--force-2pc", action="store_true",
                       help="also abort two-phase-commit transactions (KIP-939), which their transaction manager ends")
    abort.add_argument("--accept-data-loss", action="store_true",
                       help="also abort Flink KafkaSink transactions, which may be pre-commits a checkpoint counted")
    abort.add_argument("--output", choices=["text", "json"], default="text")
    abort.add_argument("--audit-log", metavar="FILE",
                       help="append the audit trail here (default $TXNWATCH_AUDIT_LOG, else "
                            "$XDG_STATE_HOME/txnwatch/txnwatch-abort-audit.jsonl); also written to stderr")
    abort.add_argument("--wait-seconds", type=float, default=30.0,
                       help="after aborting, how long to wait for the LSOs and the blocked groups to move")
    abort.add_argument("--exporter", metavar="URL",
                       help="a txnwatch exporter's URL: its metrics name the Spark queries reading each partition "
                            "(Spark's Kafka source commits no group offsets); http.auth.bearer_token of the "
                            "configuration is sent when set")


def _abort(config, args) -> int:
    from .remediation.command import AbortOptions, run_abort
    from .remediation.plan import Flags
    from .remediation.targets import TargetError, target_of

    try:
        target = target_of(args.hanging, args.transactional_id, args.partition, args.app)
    except TargetError as exc:
        print(f"txnwatch abort: {exc}", file=sys.stderr)
        return 2
    given = " ".join(f"{flag} {value}" for flag, value in (("--config", args.config), ("--cluster", args.cluster),
                                                          ("--bootstrap-servers", args.bootstrap_servers))
                     if value)
    options = AbortOptions(target, args.cluster, args.yes, Flags(args.force_live, args.force_2pc, args.accept_data_loss),
                           args.output, Path(args.audit_log) if args.audit_log else None, args.wait_seconds,
                           f"txnwatch abort {given}".rstrip(), args.exporter, config.http.auth_bearer_token)
    text, code = run_abort(config, options)
    print(text, file=sys.stdout if code != 2 or text.startswith("{") else sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pipeline"]:
        from .pipeline import main as pipeline_main

        return pipeline_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "config-schema":
        sys.stdout.write(render_schema())
        return 0
    if args.command in ("dashboards", "alerts"):
        try:
            cfg = mixin_config(args.config, cluster_selector=getattr(args, "cluster_selector", None))
        except ValueError as exc:
            print(f"txnwatch: {args.command} config error in {exc}", file=sys.stderr)
            return 2
        if args.command == "dashboards":
            from .dashboards.build import generate_dashboards, generate_provisioning

            paths = generate_dashboards(f"{args.out}/dashboards", cfg) + \
                generate_provisioning(f"{args.out}/provisioning")
        else:
            from .alerts.rules import generate_alerts

            paths = generate_alerts(args.out, cfg)
        print("\n".join(map(str, paths)))
        return 0
    flags = {k: v for k, v in vars(args).items()
             if k not in ("command", "json", "sample_seconds", "shard", "total_shards", "check_config", "flag_names",
                          *ABORT_FLAGS)}
    flag_names = getattr(args, "flag_names", None) or {}
    if args.command == "healthcheck":
        return _healthcheck(flags, flag_names)
    shard = None
    if args.command == "serve":
        from .sharding import ShardError, from_flags

        total = args.total_shards
        if total is None and os.environ.get("TXNWATCH_TOTAL_SHARDS"):
            raw = os.environ["TXNWATCH_TOTAL_SHARDS"]
            try:
                total = int(raw)
            except ValueError:
                print(f"txnwatch: TXNWATCH_TOTAL_SHARDS: expected a whole number of replicas (1 or more), "
                      f"got {raw!r}", file=sys.stderr)
                return 2
        try:
            shard = from_flags(args.shard, total)
        except ShardError as exc:
            given = "shard" in flag_names or not os.environ.get("TXNWATCH_SHARD")
            print(f"txnwatch: {exc}" + ("" if given else " (set by TXNWATCH_SHARD)"), file=sys.stderr)
            return 2
    try:
        config = load_config(flags, flag_names=flag_names)
    except ConfigError as exc:
        print(f"txnwatch: {exc}", file=sys.stderr)
        return 2
    if args.command in ("serve", "check", "abort"):
        try:
            check_logins(config)
        except ConfigError as exc:
            print(f"txnwatch: {exc}", file=sys.stderr)
            return 2
    from .logsetup import setup_logging

    secrets = config.secret_values()
    if args.command == "serve" and args.check_config:
        print(config_summary(config, shard))
        return 0
    if args.command == "serve":
        setup_logging(config.log_level, secrets, config.log_format)
        # Scrape threads wait for the GIL while polls parse big responses; a shorter switch
        # interval bounds that wait (costs a little throughput in the poll thread).
        sys.setswitchinterval(0.001)
        from .exporter.runtime.service import serve

        try:
            return serve(config, shard=shard)
        except ConfigError as exc:       # an address that cannot be listened on
            print(f"txnwatch: {exc}", file=sys.stderr)
            return 2
    if args.command == "check":
        setup_logging("ERROR", secrets)
        from .check import run_check

        text, code = run_check(config, args.json, args.sample_seconds, canary=args.canary)
        print(text)
        return code
    if args.command == "abort":
        setup_logging("ERROR", secrets)
        return _abort(config, args)
    return 2


def _healthcheck(flags: dict, flag_names: dict) -> int:
    """Where the serving process says it listens (a `serve --port` flag included), else where
    the configuration says: exit 0 healthy, 1 not, 2 a configuration that does not load."""
    from .exporter.serve.healthcheck import from_config, from_record, healthcheck
    from .exporter.serve.record import find

    record = find(flags.get("config") or os.environ.get("TXNWATCH_CONFIG") or None)
    if record is not None:
        target = from_record(record)
    else:
        try:
            target = from_config(load_config(flags, require_cluster=False, flag_names=flag_names).http)
        except ConfigError as exc:
            print(f"txnwatch: {exc}", file=sys.stderr)
            return 2
    ok, message = healthcheck(*target)
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def _listen_summary(http) -> str:
    """The effective listen addresses as URLs; every interface as [::] (0.0.0.0 without IPv6)."""
    urls = [f"{http.scheme}://{a.netloc('::' if a.every_interface else None)}" for a in http.listen]
    return ", ".join(urls)


def check_logins(config) -> None:
    """Each cluster's login, as far as it can be checked without Kafka (a keystore's password, a
    keytab, a token endpoint's scheme): a ConfigError naming the client property."""
    from .kafka.login import LoginSettingsError, check_settings

    for i, cluster in enumerate(config.clusters):
        try:
            check_settings(cluster.client_properties())
        except LoginSettingsError as exc:
            raise ConfigError(f"clusters[{i}].client.{exc.key}", exc.message, config.source) from None


def config_summary(config, shard) -> str:
    """What `serve --check-config` prints for a valid configuration (no secrets: the
    clusters' client properties are not shown, their login is described)."""
    from .kafka.login import parse as parse_login

    lines = [f"configuration valid ({config.source or 'defaults'}): {len(config.clusters)} cluster(s)"]
    for c in config.clusters:
        sources = ["poller"] + (["tap"] if c.transaction_log_tap else []) + (["canary"] if c.canary.enabled else [])
        schedule = (f"polls timed to the scrapes, at most one start per {c.poll_interval_seconds:g} s, one per "
                    f"{c.poll_idle_interval_seconds:g} s unscraped" if c.poll_schedule == "scrapes"
                    else f"poll every {c.poll_interval_seconds:g} s")
        lines.append(f"  {c.name}: {c.bootstrap_servers} ({', '.join(sources)}; {schedule})")
        lines.append(f"    login: {parse_login(c.client_properties()).describe()}")
    http = config.http
    web = http.web
    access = ([f"TLS {web.tls.min_version}+, client certificates: {web.tls.client_auth_type}"] if web.tls else []) + \
        ([f"{len(web.basic_auth_users)} basic-auth user(s)"] if web.basic_auth_users else []) + \
        (["bearer token"] if http.auth_bearer_token else [])
    if any(a.every_interface for a in http.listen):
        access.insert(0, "every interface, IPv4 mapped; 0.0.0.0 where the host has no IPv6")
    lines.append(f"  http: {_listen_summary(http)}" + (f" ({'; '.join(access)})" if access else "")
                 + f"; metrics at {http.telemetry_path}; log {config.log_level} as {config.log_format}; "
                 f"cluster name in label {config.cluster_label}")
    if shard is not None and shard.sharded:
        lines.append(f"  shard {shard.index} of 0..{shard.total - 1}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
