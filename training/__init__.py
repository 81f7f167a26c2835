"""Training the camera apps' default models on generated scenes (not part of the installed package).

Run from the repository root: ``python -m training.shapes --task detect|segment|all|clip``.
"""
