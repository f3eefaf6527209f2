"""pytest plugin: each test's start and end, with the pid of the worker running it
(bench/test_cpu/README.md)."""

import os
import time

import pytest

LOG = os.environ.get("TEST_TIMING_LOG", "/tmp/tests.log")


def _note(what: str, nodeid: str) -> None:
    with open(LOG, "a") as f:
        f.write(f"{time.time():.2f} {os.getpid()} {what} {nodeid}\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _note("start", item.nodeid)
    yield
    _note("end", item.nodeid)
