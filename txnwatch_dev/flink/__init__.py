"""PyFlink jobs with Flink's exactly-once KafkaSink, for tests and spikes.

    job.py       the job (runs in .venv-flink: imports only the stdlib and pyflink)
    runtime.py   the connector's jars (Maven, cached), the venv, FlinkJob (a job process)

Names of runtime.py are imported lazily so that `python -m txnwatch_dev.flink.job` in
.venv-flink loads nothing but the job.
"""

__all__ = ["FLINK_VERSION", "FlinkJob", "FlinkUnavailable", "connector_jars", "resolve"]


def __getattr__(name: str):
    if name in __all__:
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(name)
