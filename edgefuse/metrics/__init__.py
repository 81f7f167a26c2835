"""Task-level metrics in numpy: top-k agreement, COCO-style AP, mean IoU.

Why in numpy and here: parity checks (FP16 vs FP32, board vs host) score one model's outputs
against another's, with no dataset files and no pycocotools; the formulas are small enough to own
and to test against hand-computed cases.
"""
