"""The app as seen from outside while it runs: a live view in the browser, Prometheus metrics and
a health check, all fed from one ``LiveState`` that the pipeline's sinks update."""
