"""``torchvision.ops.nms`` as Ultralytics' own ``TorchNMS.nms`` (see the package docstring)."""


def nms(boxes, scores, iou_threshold):
    from ultralytics.utils.nms import TorchNMS  # noqa: PLC0415 (the reference's own NMS, late)

    return TorchNMS.nms(boxes, scores, iou_threshold)
