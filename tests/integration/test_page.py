"""The exporter's `/` page, as a person sees it in a browser (headless Chromium)."""

import struct
from html import escape

import pytest

from tests.integration.helpers import cluster_config
from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.screenshot import dump_dom, screenshot
from txnwatch_dev.transactions.hanging import make_hanging_transaction
from txnwatch_dev.transactions.workload import commit_group_offset, create_topics

pytestmark = pytest.mark.integration


def test_page_renders_in_chromium(own_broker, unique, exporter_factory, producers, tmp_path):
    # A hanging transaction (KIP-664 finds it once older than the broker's max timeout, 5 s here)
    # of an app (ids <app>.<n>) whose other id commits, with a read_committed group behind it
    b = own_broker(properties={"transaction.max.timeout.ms": 5000})
    topic, group, app = unique("page"), unique("relay"), unique("page") + ".writer"
    create_topics(b.bootstrap, [topic], partitions=2)
    made = make_hanging_transaction(b.bootstrap, topic, 0, transactional_id=f"{app}.0")
    commit_group_offset(b.bootstrap, group, topic, 0, made.offset)
    exp = exporter_factory(cluster_config(b.bootstrap, [topic], transaction_log_tap=True))
    exp.wait_metric(lambda m: m.get_value("kafka_transaction_hanging", topic=topic, partition=0) == 1,
                    what="a hanging transaction to show")
    wait_for(lambda: "The tap counts from" in exp.get("/")[1], 30, interval=0.5, what="the tap's counts to start")
    producers(b.bootstrap, topic, f"{app}.1", action="commit", count=3, partition=1, timeout_ms=5000).wait()

    def app_row() -> str:
        page, name = exp.get("/")[1], f"<b>{escape(app)}</b>"
        return page.split(name, 1)[1].split("</tr>", 1)[0] if name in page else ""

    wait_for(lambda: "<td class=num>3<br>" in app_row(), 30, interval=0.5, what="the app's 3 commits on the page")
    dom = dump_dom(exp.url + "/")
    for text in ("Clusters", "Findings", "Stalled partitions", f"{topic}-0", "hanging transaction", "poller",
                 f"--partition {topic}:0",
                 # the app's section: stuck, what it pins, the group behind it, the dry run
                 "Apps (most trouble first)", f"stuck: hanging transaction of {app}.0 on {topic}-0",
                 f"pins {topic}-0 (hanging", f"group {group} on {topic}-0",
                 f"txnwatch abort --bootstrap-servers {b.bootstrap} --app {app}",
                 f"{topic}-0: hanging transaction {app}.0 of app {app}"):
        assert text in dom, text
    out = tmp_path / "page.png"
    screenshot(exp.url + "/", str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 1000) and len(data) > 20_000  # a rendered page, not a blank one
