"""The exporter's `/` page, as a person sees it in a browser (headless Chromium)."""

import struct

import pytest

from tests.integration.conftest import cluster_config
from txnwatch.devtools.screenshot import dump_dom, screenshot
from txnwatch.devtools.workload import create_topics

pytestmark = pytest.mark.integration


def test_page_renders_in_chromium(broker, producers, unique, exporter_factory, tmp_path):
    topic = unique("page")
    create_topics(broker.bootstrap, [topic], partitions=2)
    p = producers(broker.bootstrap, topic, unique("orders-writer"), action="commit", count=2, partition=0,
                  then_hang=True)
    p.wait_line("open")
    p.kill()
    exp = exporter_factory(cluster_config(broker.bootstrap, [topic], hanging_threshold_seconds=1))
    exp.wait_metric(lambda m: m.get_value("kafka_transaction_hanging", topic=topic, partition=0) == 1,
                    what="a hanging transaction to show")
    dom = dump_dom(exp.url + "/")
    for text in ("Clusters", "Findings", "Stalled partitions", f"{topic}-0", "hanging transaction", "poller"):
        assert text in dom, text
    out = tmp_path / "page.png"
    screenshot(exp.url + "/", str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 1000) and len(data) > 20_000  # a rendered page, not a blank one
