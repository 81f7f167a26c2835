"""The registry of rewrite rules: an explicit, ordered tuple (order = priority at a node).

Why explicit: a rule is in the list or it is not, and a test checks that every rule module is
listed exactly once with a unique id. Where two rules can match at the same node, the first in
this tuple wins for that round; the comments say why an order matters.
"""

from __future__ import annotations

from edgefuse.optimize.rules.bn_to_affine import BnToAffine
from edgefuse.optimize.rules.fold_add_into_conv import FoldAddIntoConv
from edgefuse.optimize.rules.fold_bn_into_conv import FoldBnIntoConv
from edgefuse.optimize.rules.fold_bn_into_conv_transpose import FoldBnIntoConvTranspose
from edgefuse.optimize.rules.fold_bn_into_gemm import FoldBnIntoGemm
from edgefuse.optimize.rules.fold_input_offset_into_conv import FoldInputOffsetIntoConv
from edgefuse.optimize.rules.fold_input_scale_into_conv import FoldInputScaleIntoConv
from edgefuse.optimize.rules.fold_mul_into_conv import FoldMulIntoConv
from edgefuse.optimize.rules.fold_pad_into_conv import FoldPadIntoConv
from edgefuse.optimize.rules.merge_reshape_chain import MergeReshapeChain
from edgefuse.optimize.rules.merge_transpose_chain import MergeTransposeChain
from edgefuse.optimize.rules.merge_unsqueeze_chain import MergeUnsqueezeChain
from edgefuse.optimize.rules.recognize_hardswish import RecognizeHardSwish
from edgefuse.optimize.rules.remove_dropout import RemoveDropout
from edgefuse.optimize.rules.remove_noop_arithmetic import RemoveNoopArithmetic
from edgefuse.optimize.rules.remove_noop_cast import RemoveNoopCast
from edgefuse.optimize.rules.remove_noop_expand import RemoveNoopExpand
from edgefuse.optimize.rules.remove_noop_reshape import RemoveNoopReshape
from edgefuse.optimize.rules.remove_noop_transpose import RemoveNoopTranspose
from edgefuse.optimize.rules.silu_to_swish import SiluToSwish

ALL_RULES = (
    # Eliminations first: they expose the Conv -> BN / Conv -> Mul adjacency the folds need.
    RemoveDropout,
    RemoveNoopArithmetic,
    RemoveNoopCast,
    RemoveNoopTranspose,
    RemoveNoopReshape,
    RemoveNoopExpand,
    MergeTransposeChain,
    MergeReshapeChain,
    MergeUnsqueezeChain,
    # BN folds before bn-to-affine, which matches every BatchNormalization and must only get
    # the ones no producer could absorb.
    FoldBnIntoConv,
    FoldBnIntoConvTranspose,
    FoldBnIntoGemm,
    BnToAffine,
    FoldMulIntoConv,
    FoldAddIntoConv,
    FoldInputScaleIntoConv,
    FoldInputOffsetIntoConv,
    FoldPadIntoConv,
    RecognizeHardSwish,
)

# Rules whose results only an Ascend target can run natively (edgefuse custom ops); pipeline_for
# adds them after ALL_RULES for Ascend socs. Host targets never see them.
ASCEND_RULES = (SiluToSwish,)

RULES_BY_ID = {rule.id: rule for rule in ALL_RULES + ASCEND_RULES}
