"""Loading the trained weights that ship as package data (``edgefuse/models/weights``).

Why a loader of its own: the catalogue's other models get seeded weights (``_weights.py``); the
trained ones are stored as fp16 state_dicts to keep the package small, so they are widened to the
module's dtype on load, checked key for key (``strict``), and a missing file is an installation
problem with a hint, not a bare FileNotFoundError. torch is imported when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from edgefuse._deps import require_torch
from edgefuse.errors import ModelLoadError, Ref

if TYPE_CHECKING:
    from torch import nn

WEIGHTS_DIR = Path(__file__).with_name("weights")


def load_trained(module: nn.Module, path: Path, trainer: str) -> nn.Module:
    """Load the state_dict file ``path`` into ``module`` (fp16 values widened); eval mode.
    ``trainer`` is the command that trains the weights again (for the hints)."""
    torch = require_torch(f"loading the trained weights '{path.name}'")
    if not path.is_file():
        raise ModelLoadError(
            f"the trained weights '{path}' are missing",
            hint=f"reinstall edgefuse, or train them again: {trainer}",
            reference=Ref.MISSING_TRAINED_WEIGHTS,
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    reference = module.state_dict()
    widened = {
        key: value.to(reference[key].dtype) if key in reference else value
        for key, value in state.items()
    }
    try:
        module.load_state_dict(widened, strict=True)
    except RuntimeError as exc:
        raise ModelLoadError(
            f"the trained weights '{path}' do not fit the model's layout",
            context=str(exc).splitlines()[0],
            hint="the weights and the code are from different versions: reinstall edgefuse, "
            f"or train them again: {trainer}",
            reference=Ref.TRAINED_WEIGHTS_MISMATCH,
        ) from None
    return module.eval()
