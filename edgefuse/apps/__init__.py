"""The detection and segmentation apps: ``edgefuse detect`` / ``edgefuse segment`` and
``python -m apps.detection`` / ``python -m apps.segmentation`` from a checkout (same code)."""
