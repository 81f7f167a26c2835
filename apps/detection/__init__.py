"""The detection app (``python -m apps.detection``); the code is ``edgefuse.apps.detection``."""
