"""The example apps, runnable from a checkout: ``python -m apps.detection`` and
``python -m apps.segmentation``. Each is its ``config.yaml`` plus a call into ``edgefuse``; once
installed the same apps are ``edgefuse detect`` and ``edgefuse segment``."""
