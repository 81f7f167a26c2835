"""Tracking: detections of consecutive frames joined into tracks with IDs (``ByteTracker``)."""
