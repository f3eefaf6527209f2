"""txnwatch's Spark side: a StreamingQueryListener exporting what Structured Streaming hides.

    from txnwatch.spark_listener import attach
    listener = attach(spark, serve_port=9464)                      # /metrics on the driver
    listener = attach(spark, forward_url="http://exporter:10129", token="...")  # to the exporter

`events` and `state` need no pyspark (the exporter's ingest imports them); `attach` and
`TxnWatchListener` import pyspark lazily.
"""

from __future__ import annotations

from typing import Any

from .events import EventValidationError, validate_event, validate_payload
from .forwarder import Forwarder
from .serve import serve  # binds the function over the submodule attribute of the same name
from .state import SparkQueryState

__all__ = ["AtLeastOnceKafkaSink", "EventValidationError", "ExactlyOnceKafkaSink", "Forwarder",
           "SparkQueryState", "TxnWatchListener", "attach", "detach", "serve", "validate_event",
           "validate_payload"]


def __getattr__(name: str) -> Any:
    if name in ("TxnWatchListener", "attach", "detach"):
        from . import listener

        return getattr(listener, name)
    if name in ("ExactlyOnceKafkaSink", "AtLeastOnceKafkaSink"):
        from . import sink

        return getattr(sink, name)
    raise AttributeError(name)
