"""Where the exporter listens, as configured (no socket is opened here): listen addresses and
their syntax, the two spellings of the listen address across flags, environment and file,
the telemetry path, flags named in errors as typed, the decision to fall back to IPv4, and
which serving process's record a healthcheck goes by. tests/integration/test_listen.py binds."""

from __future__ import annotations

import errno
import json
import os
import re

import pytest

from txnwatch.cli import main
from txnwatch.config import ConfigError, ListenAddress, load_config
from txnwatch.config.listen import clash, parse_address
from txnwatch.exporter.serve import record
from txnwatch.exporter.serve.healthcheck import from_config
from txnwatch.exporter.serve.listen import falls_back, wildcard_hosts

BASE = {"TXNWATCH_BOOTSTRAP_SERVERS": "b:1"}


def listen(flags=None, env=None, **kw) -> list[tuple[str, int]]:
    return [(a.host, a.port) for a in load_config(flags or {}, env={**BASE, **(env or {})}, **kw).http.listen]


@pytest.mark.parametrize("text, address", [
    (":9000", ("", 9000)), ("[::]:9000", ("::", 9000)), ("[::0]:9000", ("::", 9000)), ("[::1]:1", ("::1", 1)),
    ("127.0.0.1:65535", ("127.0.0.1", 65535)), ("exporter-0.kafka.svc:9000", ("exporter-0.kafka.svc", 9000)),
    (" localhost:80 ", ("localhost", 80)),
])
def test_an_address_is_host_port_an_ipv6_address_in_brackets_or_port_alone(text, address):
    assert parse_address(text) == address


@pytest.mark.parametrize("text, says", [
    ("9000", "has no port"), ("::1:9000", "an IPv6 address goes in brackets, as in [::1]:9000"),
    ("[::1]:0", "the port must be a number from 1 to 65535"), ("h:70000", "from 1 to 65535"), ("h:", "from 1"),
    ("http://h:9000", "not a URL"), ("h:9000/metrics", "not a URL"), ("[nope]:1", "'nope' is not an IPv6 address"),
    ("a b:1", "'a b' is not an IP address or host name"),
])
def test_a_bad_address_says_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_address(text)


def test_addresses_that_cannot_both_be_listened_on():
    assert clash([("127.0.0.1", 1), ("::1", 1), ("", 2), ("0.0.0.0", 3), ("::1", 3)]) is None
    assert clash([("h", 1), ("h", 1)]) == (0, 1, None)
    assert clash([("127.0.0.1", 1), ("", 1)]) == (0, 1, "every interface")        # dual-stack: IPv4 too
    assert clash([("::", 1), ("::1", 1)]) == (0, 1, "every interface")
    assert clash([("0.0.0.0", 1), ("::", 1)]) == (0, 1, "every interface")
    assert clash([("10.0.0.1", 1), ("0.0.0.0", 1)]) == (0, 1, "every IPv4 address")


def test_the_default_is_every_interface_on_10129():
    assert listen() == [("", 10129)]
    address = load_config({}, env=BASE).http.listen[0]
    assert address.every_interface and address.host_origin.default and address.port_origin.default


# ---------------------------------------------------------------- one setting, two spellings

def test_the_highest_layer_that_sets_either_spelling_decides(tmp_path):
    file = tmp_path / "txnwatch.yaml"
    file.write_text("http: {listen_addresses: ['127.0.0.1:1', '[::1]:1']}\n")
    assert listen({"config": str(file)}) == [("127.0.0.1", 1), ("::1", 1)]
    # the environment's host and port win over the file's addresses, and a flag's address over them
    assert listen({"config": str(file)}, {"TXNWATCH_PORT": "2"}) == [("", 2)]
    assert listen({"config": str(file), "web_listen_address": [":3"]}, {"TXNWATCH_PORT": "2"}) == [("", 3)]
    # ... and a flag's port over the environment's addresses (its host from below: the default)
    assert listen({"port": 4}, {"TXNWATCH_HTTP__LISTEN_ADDRESSES": ":5"}) == [("", 4)]
    # host and port still merge across layers
    file.write_text("http: {host: 127.0.0.1, port: 6}\n")
    assert listen({"config": str(file), "port": 7}) == [("127.0.0.1", 7)]
    assert listen({"config": str(file)}, {"TXNWATCH_HTTP__HOST": "::1"}) == [("::1", 6)]


@pytest.mark.parametrize("flags, env, says", [
    ({"port": 1, "web_listen_address": [":2"]}, {},
     "http.listen_addresses: --port and --web.listen-address both set the listen address"),
    ({"host": "h", "web_listen_address": [":2"]}, {"TXNWATCH_PORT": "1"},
     "--host and --web.listen-address both set the listen address"),
    ({}, {"TXNWATCH_PORT": "1", "TXNWATCH_HTTP__LISTEN_ADDRESSES": ":2"},
     "TXNWATCH_PORT and TXNWATCH_HTTP__LISTEN_ADDRESSES both set the listen address"),
    ({}, {"TXNWATCH_HTTP__HOST": "h", "TXNWATCH_WEB_LISTEN_ADDRESS": ":2"},
     "TXNWATCH_HTTP__HOST and TXNWATCH_WEB_LISTEN_ADDRESS both set the listen address"),
    ({}, {"TXNWATCH_HTTP": '{"port": 1, "listen_addresses": [":2"]}'},
     "TXNWATCH_HTTP and TXNWATCH_HTTP both set the listen address"),
])
def test_one_layer_setting_both_spellings_is_an_error_naming_both(flags, env, says):
    with pytest.raises(ConfigError) as ei:
        load_config(flags, env={**BASE, **env})
    assert says in str(ei.value)
    assert "(set by" not in str(ei.value)             # named once, in the message


def test_a_file_setting_both_spellings_is_an_error_naming_the_file(tmp_path):
    file = tmp_path / "txnwatch.yaml"
    file.write_text("http: {port: 1, listen_addresses: [':2']}\n")
    with pytest.raises(ConfigError) as ei:
        load_config({"config": str(file)}, env=BASE)
    assert str(ei.value).startswith(f"config error in {file}: http.listen_addresses: http.port and "
                                    "http.listen_addresses both set the listen address")


def test_the_flat_and_the_nested_variable_take_a_list_or_comma_separated_addresses():
    assert listen(env={"TXNWATCH_WEB_LISTEN_ADDRESS": "127.0.0.1:1, [::1]:1"}) == [("127.0.0.1", 1), ("::1", 1)]
    assert listen(env={"TXNWATCH_HTTP__LISTEN_ADDRESSES": '["127.0.0.1:1", "[::1]:1"]'}) == \
        [("127.0.0.1", 1), ("::1", 1)]
    # the flat name wins over the nested one, as for every key
    assert listen(env={"TXNWATCH_WEB_LISTEN_ADDRESS": ":1", "TXNWATCH_HTTP__LISTEN_ADDRESSES": ":2"}) == [("", 1)]


def test_the_addresses_remember_what_set_them_for_the_errors_at_bind(tmp_path):
    file = tmp_path / "txnwatch.yaml"
    file.write_text("http: {host: 127.0.0.1}\n")
    a = load_config({"config": str(file), "port": 9}, env=BASE, flag_names={"port": "--port"}).http.listen[0]
    assert (a.host_origin.key, a.host_origin.set_by, a.port_origin.key, a.port_origin.set_by) == \
        ("http.host", None, "http.port", "--port")
    assert str(a.host_origin.error("cannot listen", str(file))) == f"config error in {file}: http.host: cannot listen"
    assert str(a.port_origin.error("cannot listen", "flags/environment")) == \
        "config error in flags/environment: http.port: cannot listen (set by --port)"
    b = load_config({}, env={**BASE, "TXNWATCH_HTTP__LISTEN_ADDRESSES": ":1,:2"}).http.listen[1]
    assert (b.port_origin.key, b.port_origin.set_by) == ("http.listen_addresses[1]", "TXNWATCH_HTTP__LISTEN_ADDRESSES")
    assert str(ListenAddress("", 10129).port_origin.error("cannot listen", None)) == \
        "config error: http.port: cannot listen (the default: set another by --web.listen-address, or --host " \
        "and --port)"


@pytest.mark.parametrize("argv, env, says", [
    (["--web.listen-address", ":1", "--web.listen-address", ":1"], {},
     "http.listen_addresses[1]: ':1' is given twice: give each address once (set by --web.listen-address)"),
    (["--web.listen-address", "[::]:1", "--web.listen-address", "127.0.0.1:1"], {},
     "http.listen_addresses[1]: '127.0.0.1:1' and '[::]:1' share port 1, where one of them takes every interface: "
     "on one port give either every interface or specific addresses (set by --web.listen-address)"),
    (["--web.listen-address", "9000"], {}, "http.listen_addresses[0]: '9000' has no port"),
    (["--web.listen-address", ":1", "--port", "2"], {}, "--port and --web.listen-address both set the listen address"),
    (["--web.telemetry-path", "/healthz"], {}, "http.telemetry_path: /healthz is served by the exporter already "
                                              "(/, /healthz, /readyz, /api/...): choose another, e.g. /metrics "
                                              "(set by --web.telemetry-path)"),
    (["--web.config.file", "/nope/web.yml"], {}, "(set by --web.config.file)"),
    (["--web-config-file", "/nope/web.yml"], {}, "(set by --web-config-file)"),
    (["--hanging-threshold", "-5"], {}, "clusters[0].hanging_threshold_seconds: must be > 0, got -5.0 "
                                        "(set by --hanging-threshold)"),
    (["--hanging", "-5"], {}, "(set by --hanging-threshold)"),        # an abbreviation: the flag's full name
    (["--poll-timeout", "0"], {}, "(set by --poll-timeout)"),
    ([], {"TXNWATCH_CONFIG": "/nope/txnwatch.yaml"}, "config error: TXNWATCH_CONFIG: cannot read /nope/txnwatch.yaml"),
    (["--config", "/nope/txnwatch.yaml"], {}, "config error: --config: cannot read /nope/txnwatch.yaml"),
    ([], {"TXNWATCH_SHARD": "first"}, "--shard must be a number or auto, got 'first' (set by TXNWATCH_SHARD)"),
])
def test_serve_names_the_flag_or_variable_as_spelled_and_exits_2(argv, env, says, capsys, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["serve", "--check-config", "--bootstrap-servers", "b:1", *argv]) == 2
    assert says in capsys.readouterr().err


def test_argparse_names_the_flags_as_spelled(capsys):
    for argv, says in ((["--port", "http"], "argument --port: invalid int value: 'http'"),
                       (["--web.listen-address"], "argument --web.listen-address: expected one argument"),
                       (["--web-config-file"], "argument --web.config.file/--web-config-file: expected one argument")):
        with pytest.raises(SystemExit) as ei:
            main(["serve", "--check-config", "--bootstrap-servers", "b:1", *argv])
        assert ei.value.code == 2 and says in capsys.readouterr().err


def test_a_key_the_schema_does_not_know_is_refused_by_check_config(tmp_path, capsys):
    file = tmp_path / "txnwatch.yaml"
    file.write_text("clusters: [{name: a, bootstrap_servers: 'b:1'}]\nhttp: {listen_address: ':1'}\n")
    assert main(["serve", "--check-config", "--config", str(file)]) == 2
    assert f"config error in {file}: http.listen_address: unknown key (allowed: auth, host, ingest_max_bytes, " \
           "ingest_token, listen_addresses, port" in capsys.readouterr().err


def test_check_config_prints_the_effective_addresses(capsys, monkeypatch):
    assert main(["serve", "--check-config", "--bootstrap-servers", "b:1"]) == 0
    assert "  http: http://[::]:10129 (every interface, IPv4 mapped; 0.0.0.0 where the host has no IPv6); " \
           "metrics at /metrics; log INFO" in capsys.readouterr().out
    monkeypatch.setenv("TXNWATCH_WEB_TELEMETRY_PATH", "/txnwatch/metrics")
    assert main(["serve", "--check-config", "--bootstrap-servers", "b:1", "--web.listen-address", "[::1]:9000",
                 "--web.listen-address", "127.0.0.1:9000", "--web.listen-address", ":9100"]) == 0
    assert "  http: http://[::1]:9000, http://127.0.0.1:9000, http://[::]:9100 (every interface, IPv4 mapped; " \
           "0.0.0.0 where the host has no IPv6); metrics at /txnwatch/metrics;" in capsys.readouterr().out
    assert main(["serve", "--check-config", "--bootstrap-servers", "b:1", "--host", "::1", "--port", "1"]) == 0
    assert "  http: http://[::1]:1; metrics at /txnwatch/metrics;" in capsys.readouterr().out


# ---------------------------------------------------------------- binding's decisions, the healthcheck's target

def test_only_every_interface_falls_back_and_only_when_ipv6_is_missing():
    every, explicit = ListenAddress("", 1), ListenAddress("::", 1)
    assert wildcard_hosts(True) == ("::", "0.0.0.0") and wildcard_hosts(False) == ("0.0.0.0",)
    for missing in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
        assert falls_back(every, OSError(missing, "no IPv6"))
        assert not falls_back(explicit, OSError(missing, "no IPv6"))
        assert not falls_back(ListenAddress("::1", 1), OSError(missing, "no IPv6"))
    for other in (errno.EADDRINUSE, errno.EACCES):
        assert not falls_back(every, OSError(other, "taken or forbidden"))


def test_the_configurations_healthcheck_target():
    def target(**http):
        return from_config(load_config({}, env={**BASE, **{f"TXNWATCH_HTTP__{k.upper()}": v
                                                          for k, v in http.items()}}).http)

    assert target() == ("http://127.0.0.1:10129", False)
    assert target(host="::", port="1") == ("http://127.0.0.1:1", False)       # dual-stack: IPv4 loopback
    assert target(host="::1", port="1") == ("http://[::1]:1", False)
    assert target(listen_addresses="[::1]:2,127.0.0.1:3") == ("http://[::1]:2", False)


@pytest.fixture
def records(tmp_path, monkeypatch):
    """Records in a directory of the test's own (the temporary directory is where they live)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_healthcheck_goes_by_the_live_record_of_its_configuration(records, tmp_path):
    gone = 2 ** 22 + 1                       # above pid_max's default: no such process
    config = tmp_path / "txnwatch.yaml"
    config.write_text("")
    mine = record.Record(os.getpid(), ("http://127.0.0.1:1",), False, record.config_key(str(config)))
    assert record.find(None) is None
    path = record.write(mine)
    assert record.find(None) == mine and record.find(str(config)) == mine
    assert record.find(str(tmp_path / "other.yaml")) is None       # another exporter's file: not this one
    record.write(record.Record(os.getppid(), ("http://127.0.0.1:2",)))
    assert record.find(None) is None                                # two alive, none named: the configuration
    assert record.find(str(config)) == mine
    (records / f"{record.PREFIX}{gone}.json").write_text(json.dumps({"pid": gone, "urls": ["http://127.0.0.1:3"]}))
    assert record.find(str(config)) == mine
    record.write(mine)                                              # a start sweeps the records of the dead
    assert not (records / f"{record.PREFIX}{gone}.json").exists()
    record.remove(path)
    assert record.find(str(config)) is None
