"""The host backends: ONNX Runtime sessions (CPU, CUDA, TensorRT) and the AIPP frame wrapper
that makes a host session take the same camera frames as the board."""
