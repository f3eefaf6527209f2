import logging

from txnwatch.logsetup import setup_logging


def test_secrets_are_scrubbed_from_every_log_line(capsys):
    secret = "p4ssw0rd-xyz"
    setup_logging("DEBUG", [secret])
    try:
        logging.getLogger("txnwatch.test").warning("connect failed with %s", {"sasl.password": secret})
        logging.getLogger("txnwatch.test").error(f"inline {secret} too")
        # kafka-python logs its whole configuration at DEBUG: silenced regardless of our level.
        logging.getLogger("kafka.admin.client").debug("Starting KafkaAdminClient with configuration: %s",
                                                      {"sasl_plain_password": secret})
        err = capsys.readouterr().err
        assert secret not in err
        assert err.count("***") == 2 and "connect failed" in err and "inline" in err
    finally:
        setup_logging("WARNING")


def test_client_library_log_storms_are_rate_limited(capsys):
    setup_logging("INFO")
    try:
        lg = logging.getLogger("txnwatch.librdkafka")
        for i in range(500):
            lg.error("FAIL [thrd:127.0.0.1:%d/bootstrap]: Connect failed: Connection refused (after %dms)", 9092, i)
        err = capsys.readouterr().err
        assert err.count("Connection refused") == 1
    finally:
        setup_logging("WARNING")


def test_kafka_python_outage_lines_are_one_line_each_and_rate_limited(capsys):
    """kafka-python logs a broker outage from child loggers (kafka.net.*), with tracebacks,
    many times a second: one line per shape gets through, without the traceback. The
    exporter's own lines are never limited."""
    setup_logging("INFO")
    try:
        for i in range(300):
            try:
                raise ConnectionResetError(104, "Connection reset by peer")
            except ConnectionResetError:
                logging.getLogger("kafka.net.transport").exception("Error sending request data: attempt %d", i)
            logging.getLogger("kafka.cluster").error("Metadata refresh: failed KafkaConnectionError: 111 ECONNREFUSED")
        for i in range(3):
            logging.getLogger("txnwatch.exporter.poll.poller").warning("cluster c: poll %d failed", i)
        err = capsys.readouterr().err
        assert err.count("Error sending request data") == 1 and "Traceback" not in err
        assert err.count("Metadata refresh") == 1
        assert err.count("txnwatch.exporter.poll.poller") == 3
    finally:
        setup_logging("WARNING")


def _one_error_with_traceback(fmt: str, secret: str, capsys) -> str:
    setup_logging("INFO", [secret], fmt)
    try:
        try:
            raise RuntimeError(f"login refused for password {secret}")
        except RuntimeError:
            logging.getLogger("txnwatch.poller").exception('poll of "prod" failed: %s', secret)
        return capsys.readouterr().err
    finally:
        setup_logging("WARNING")


def test_json_lines_carry_the_fields_and_no_secret(capsys):
    import json

    err = _one_error_with_traceback("json", "s3cr3t-token", capsys)
    (line,) = err.splitlines()
    rec = json.loads(line)
    assert rec["level"] == "error" and rec["logger"] == "txnwatch.poller"
    assert rec["message"] == 'poll of "prod" failed: ***' and rec["time"].endswith("Z")
    assert "RuntimeError: login refused for password ***" in rec["exception"]
    assert "s3cr3t-token" not in err


def test_logfmt_lines_quote_what_needs_it_and_carry_no_secret(capsys):
    err = _one_error_with_traceback("logfmt", "s3cr3t-token", capsys)
    (line,) = err.splitlines()
    assert line.startswith("time=") and " level=error logger=txnwatch.poller " in line
    assert 'msg="poll of \\"prod\\" failed: ***"' in line
    assert 'exception="Traceback' in line and "\\n" in line
    assert "s3cr3t-token" not in err


def test_text_tracebacks_are_scrubbed_too(capsys):
    err = _one_error_with_traceback("text", "s3cr3t-token", capsys)
    assert "RuntimeError: login refused for password ***" in err and "s3cr3t-token" not in err


def test_every_configurable_format_has_a_formatter():
    from txnwatch.config import LOG_FORMATS
    from txnwatch.logsetup import FORMATS

    assert set(FORMATS) == set(LOG_FORMATS)
