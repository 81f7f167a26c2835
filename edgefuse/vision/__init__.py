"""What the camera apps share: sources, pre/post-processing, pipeline, sinks, scene generator."""
