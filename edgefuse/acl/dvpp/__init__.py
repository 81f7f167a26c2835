"""DVPP, the board's media units: VDEC/JPEGD decode and VPC letterbox into an AIPP YUV420SP
model input, with the documented picture rules checked before every call (``geometry``)."""
