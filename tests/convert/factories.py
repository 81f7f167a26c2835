"""Factories named as 'tests.convert.factories:NAME' by the convert tests.

Why a module of its own: `edgefuse convert package.module:factory` imports by name, so the tests
need a real importable module (the repository root is on sys.path when tests run from it).
"""

from __future__ import annotations

import torch
from torch import nn


class TinyNet(nn.Module):
    """Conv + BatchNorm + ReLU, pooled into a linear head: the shape of a classifier, 8x8 input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def tiny_net() -> nn.Module:
    """Seeded weights and non-trivial BatchNorm statistics, in eval mode."""
    torch.manual_seed(0)
    model = TinyNet()
    model.bn.running_mean.uniform_(-0.5, 0.5)
    model.bn.running_var.uniform_(0.5, 2.0)
    return model.eval()


def broken_factory() -> nn.Module:
    raise RuntimeError("weights file 'missing.pth' not found")


def not_a_module() -> str:
    return "a string"
