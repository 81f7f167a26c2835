"""Annotated frames: boxes, labels, class overlays and the palette they use."""
