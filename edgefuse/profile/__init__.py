"""profile: where a model's time goes, per node and per op type, with the board's floor.

One module per job: ``cost`` (FLOPs and bytes from the graph's shapes), ``segments`` (which nodes
of the model each executed kernel covers), ``ort_trace`` (ONNX Runtime's profiler JSON),
``msprof`` (CANN's op_summary CSV), ``board`` (a BUILD_DIR run under msprof), ``socs`` and
``roofline`` (the board's lower bound), ``table`` (the rows and their rendering), ``compare``
(two models side by side, savings per rule), ``chrome_trace`` (the trace-event file) and ``run``
(the ``profile`` function, on the host backends).
"""
