"""edgefuse's custom operators: each declared once, runnable on the host, buildable for Ascend.

One folder per op (``swish/``, ``depthwise_conv/``, ``yolo_head/``) holds ``spec.py`` -- the
OpSpec with the ONNX schema, shape inference, numpy reference and the decomposition into standard
ONNX ops -- and the hand-written TBE kernel ``tbe/impl/<kernel>.py`` as package data.

Generated versus shipped (the choice the design left open): the op-info ``.ini``, the ``REG_OP``
header, the prototype source and the ONNX parser plugin are *rendered from the OpSpec* when a
package is built (``_render.py``), not kept as files. Each of them restates the same names,
dtypes, formats and attributes; rendered from one declaration they agree by construction, and a
new soc is one more ``.ini`` folder rather than another copy to keep in step. What cannot be
derived stays hand-written next to the spec: the kernel, and the C++ bodies of InferShape and
the verifier. The tests still parse the rendered files and compare them with the spec and with
the kernel's Python signature, so a rendering bug or a kernel that drifted from its spec fails.

Modules: ``spec`` (OpSpec), ``registry`` (ALL_OPS), ``host`` (run on ONNX Runtime via the
decompositions), ``_render`` (Ascend text), ``build`` (``edgefuse ops build``).
"""
