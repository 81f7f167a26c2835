"""The app logic of the detection and segmentation apps: config files, the run loop, the models.

``edgefuse detect`` / ``edgefuse segment`` and ``python -m apps.detection`` /
``python -m apps.segmentation`` from a checkout run this same code. The camera library they are
built from (streams, the model adapter, decoding, drawing) is ``edgefuse.vision``, usable by
users' own programs; ``apps/`` at the repository root is only a ``python -m`` shell with a
``config.yaml`` and holds no logic: a feature of the apps goes here, one of the library in
``edgefuse.vision``."""
