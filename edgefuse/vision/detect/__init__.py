"""Detection: output layouts decoded to boxes, the Detector, text boxes."""
