"""The compile stage for Ascend: an ONNX model in, a BUILD_DIR (and an OM where ATC runs) out.

``soc``, ``opsupport``, ``precision`` and ``aipp`` are knowledge of the target that earlier stages
consult too (optimize validates a soc, quantize writes keep-FP32 files); ``prepare`` and
``compile`` are the stage itself.
"""
