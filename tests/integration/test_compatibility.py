"""docs/compatibility.md against what this run showed (marked run_last: tests/conftest.py
orders it after every other test).

Every cell of the compatibility tables that claims something must have been recorded, with
the same text, by the test that proved it in this run (tests/compat.py); every recorded cell
must be in the tables. So the page cannot claim more than the suite ran, and a new release
(the default is the newest 4.x on Maven Central) fails here until the page says what it
showed."""

from __future__ import annotations

import pytest

from tests import compat

pytestmark = [pytest.mark.integration, pytest.mark.run_last]


def test_the_compatibility_tables_are_what_this_run_showed(request):
    claimed = {k: v for k, v in compat.parse_tables(compat.DOC.read_text()).items() if v != "—"}
    shown = compat.recorded(request.config)
    assert claimed, f"no tables found in {compat.DOC}"
    unproven = {k: v for k, v in claimed.items() if shown.get(k) != v}
    unclaimed = {k: v for k, v in shown.items() if claimed.get(k) != v}
    assert not unproven and not unclaimed, (
        f"{compat.DOC.name} and this run disagree (the page claims only what the run showed: run the whole "
        f"integration suite, and update the page to what it showed):\n"
        + "".join(f"  page {k}: {v!r}, run: {shown.get(k)!r}\n" for k, v in sorted(unproven.items()))
        + "".join(f"  run {k}: {v!r}, page: {claimed.get(k)!r}\n" for k, v in sorted(unclaimed.items())))
