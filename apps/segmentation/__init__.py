"""The segmentation app (``python -m apps.segmentation``); the code is
``edgefuse.apps.segmentation``."""
