"""DepthwiseConv: a per-channel convolution kernel tiled in C0 blocks; see spec.py."""
