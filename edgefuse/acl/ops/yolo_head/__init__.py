"""YoloHead: box decoding and class-aware NMS on the device; see spec.py."""
