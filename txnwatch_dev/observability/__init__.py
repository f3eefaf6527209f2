"""The Prometheus side: the exporter as a process, Prometheus, Alertmanager, scrapes, naming, screenshots."""
