"""The Helm chart's generated parts are current (scripts/regenerate.py writes them; run it
when this fails): its files/ (the rules, dashboards and Alertmanager example, made with the
sentinels its templates replace) and values.schema.json's `config`, the exporter's JSON
Schema, so that a key the exporter would refuse fails `helm install` instead."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from txnwatch.config.schema import json_schema

ROOT = Path(__file__).resolve().parents[2]
VALUES_SCHEMA = ROOT / "charts" / "txnwatch" / "values.schema.json"


def _regenerate():
    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "scripts" / "regenerate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_charts_generated_files_are_current():
    assert _regenerate().drift() == [], "run scripts/regenerate.py"


def test_the_config_value_is_checked_against_the_exporters_schema():
    config = json.loads(VALUES_SCHEMA.read_text())["properties"]["config"]
    exporter = json_schema()
    assert config["properties"].keys() == exporter["properties"].keys()
    assert config["properties"]["http"] == exporter["properties"]["http"]
    assert config["additionalProperties"] is False and "clusters" in config["required"]


def test_the_generators_use_the_charts_settings_as_opaque_values():
    _regenerate().check_sentinels_are_opaque()        # raises SentinelsBroken, naming the file, if not
