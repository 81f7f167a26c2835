"""Swish: one elementwise kernel for x * sigmoid(alpha * x); see spec.py."""
