"""The reference Spark pipeline with faults injected into its exactly-once sink's tasks.

    sink_faults.py   the fault plan (SinkFaults), made the sink's producer_factory, and the
                     producer that injects it (FaultyProducer)
    pipeline.py      `python -m txnwatch_dev.spark.pipeline [--fault NAME=JSON ...] <the flags of
                     python -m txnwatch.pipeline>`: the pipeline, its sink's tasks faulted
"""
