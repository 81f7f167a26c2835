"""Frames in, results out: sources, the threaded pipeline, its stats and the sinks."""
