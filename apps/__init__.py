"""The example apps' thin shell, runnable from a checkout: ``python -m apps.detection`` and
``python -m apps.segmentation``. Each is its ``config.yaml`` plus a call into ``edgefuse.apps``
(the app logic; the library under it is ``edgefuse.vision``): no app logic lives here. Once
installed the same apps are ``edgefuse detect`` and ``edgefuse segment``."""
