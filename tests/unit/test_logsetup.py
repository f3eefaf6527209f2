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
