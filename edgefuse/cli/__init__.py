"""The ``edgefuse`` command line: one module per verb, each a thin wrapper over the Python API."""
