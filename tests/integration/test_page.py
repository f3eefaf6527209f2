"""The exporter's `/` page, as a person sees it in a browser (headless Chromium)."""

import struct

import pytest

from tests.integration.helpers import cluster_config
from txnwatch_dev.observability.screenshot import dump_dom, screenshot
from txnwatch_dev.transactions.hanging import make_hanging_transaction
from txnwatch_dev.transactions.workload import create_topics

pytestmark = pytest.mark.integration


def test_page_renders_in_chromium(own_broker, unique, exporter_factory, tmp_path):
    # A hanging transaction (KIP-664 finds it once older than the broker's max timeout, 5 s here)
    b = own_broker(properties={"transaction.max.timeout.ms": 5000})
    topic = unique("page")
    create_topics(b.bootstrap, [topic], partitions=2)
    made = make_hanging_transaction(b.bootstrap, topic, 0)
    exp = exporter_factory(cluster_config(b.bootstrap, [topic]))
    exp.wait_metric(lambda m: m.get_value("kafka_transaction_hanging", topic=topic, partition=0) == 1,
                    what="a hanging transaction to show")
    dom = dump_dom(exp.url + "/")
    for text in ("Clusters", "Findings", "Stalled partitions", f"{topic}-0", "hanging transaction", "poller",
                 f"abort --topic {topic} --partition 0 --start-offset {made.offset}"):
        assert text in dom, text
    out = tmp_path / "page.png"
    screenshot(exp.url + "/", str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 1000) and len(data) > 20_000  # a rendered page, not a blank one
