"""Host ground truth: run an ONNX model as written, compare arrays, make and load inputs, and
emulate the board's FP16 storage.

Why a package that imports no stage: convert, optimize, quantize, compile and verify all need the
same few facts (what does this graph compute on these inputs, how close are two outputs), and when
each stage reached into another for them, the stages imported each other in a circle. Everything
here imports only ``edgefuse.errors``, ``edgefuse.session`` and the custom-op declarations.
"""
