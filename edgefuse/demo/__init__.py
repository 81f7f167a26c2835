"""``edgefuse demo``: the whole product on the embedded trained models and their sample clip.

The shapes detector (YOLOv8 layout) and segmenter (DeepLabV3+) go through export, convert,
optimize, FP16 and INT8 calibrated on frames of the clip and compile for the Atlas 200I DK A2, the
detector's build ending in the YoloHead custom op (decode + NMS on the device); then both apps
run over the clip on the compiled builds, writing annotated videos and JSON Lines, two generated
cameras run at once through the detector with tracking and a counting line each, and a table sums
up parity (the YoloHead's against the host decode too), FP16 accuracy against the clip's ground
truth and INT8's on its host emulation (a prediction until a board confirms it), the board's
floor at FP16 and INT8, frame rates, and the cameras' counts and tracking scores against their
labels. See
``edgefuse.demo.run``.
"""
