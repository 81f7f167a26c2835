"""The pass an Ascend pipeline runs after its rules: custom ops carry their decompositions.

Why: ``silu-to-swish`` and friends put ``edgefuse::*`` nodes into the model. ATC maps them to the
custom kernels of ``edgefuse ops build``; every other consumer (ONNX Runtime, ``verify``,
Netron) needs the op's ONNX function, so the optimized file must carry it to run everywhere.
"""

from __future__ import annotations

import onnx_ir as ir

from edgefuse.acl.ops.host import attach_functions_ir
from edgefuse.optimize.passes import GraphPass


class AttachCustomOpFunctions(GraphPass):
    id = "attach-custom-op-functions"
    description = "give every edgefuse custom op its ONNX function (raises opset to 18 if lower)"

    def __call__(self, model: ir.Model) -> bool:
        return attach_functions_ir(model)
