"""Segmentation: outputs decoded to class maps, the Segmenter."""
