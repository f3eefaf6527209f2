"""Development helpers: an embedded Tansu broker, transactional workloads, the demo.

Used by the test suite, the benchmarks and `make demo`; never by the exporter itself.
"""
