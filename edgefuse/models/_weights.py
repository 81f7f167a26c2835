"""Seeded, non-trivial, numerically sane weights for the catalogue's untrained models.

Why not PyTorch's default init: it draws from the global RNG (a side effect on the caller, and not
reproducible from a seed), and it leaves every BatchNorm at mean 0, variance 1, weight 1, bias 0,
where folding BN into the conv is an identity and a broken fold goes unnoticed. Why not random
statistics alone: in eval mode nothing normalises, so 50+ layers of random convs drift by orders
of magnitude (up to inf in FP16) and classifier logits end up constant or huge.

So weights are set in three steps, all from one ``torch.Generator`` seeded by ``seed``:
1. construction runs inside ``fork_rng`` with the global RNG seeded, so defaults (conv biases,
   head priors set in constructors) depend on the seed only and the caller's RNG is untouched;
2. every Conv2d/Linear weight is drawn Kaiming-normal, every BatchNorm gets random statistics
   (running_mean ~ N(0, 0.1), running_var ~ U(0.5, 2)) and affine (weight ~ U(0.5, 1.5),
   bias ~ N(0, 0.1));
3. one calibration forward on a seeded N(0, 1) input rescales each conv and linear weight, in
   execution order, so that its output (bias excluded) has unit RMS: a data-dependent init (LSUV,
   Mishkin & Matas 2016) that keeps activations O(1) through any depth while the BatchNorm
   statistics stay the random ones of step 2.
Parameters that do not require grad (YOLOv8's DFL bins) and buffers (anchors) are left alone.

Trained entries (``dbnet_text``) load a state_dict shipped in ``weights/`` instead
(``load_trained``): stored FP16 to keep the package small, widened to the module's dtypes, checked
key for key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from edgefuse.errors import ModelLoadError, Ref

TARGET_RMS = 1.0
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def build_seeded(
    factory: Callable[[], nn.Module], *, seed: int, calibration_shape: Sequence[int]
) -> nn.Module:
    """Build ``factory()`` with weights that depend on ``seed`` only, in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        _randomize(model, generator)
        model.eval()
        _calibrate(model, torch.randn(*calibration_shape, generator=generator))
    return model


def load_trained(factory: Callable[[], nn.Module], name: str) -> nn.Module:
    """``factory()`` with the state_dict in ``weights/<name>``, in eval mode; the global RNG is
    untouched (construction draws default weights from it before they are replaced)."""
    path = WEIGHTS_DIR / name
    if not path.is_file():
        raise ModelLoadError(
            f"the trained weights '{path}' are missing",
            hint="reinstall edgefuse, or train them again (the JSON record beside them names "
                 "the command)",
            reference=Ref.MISSING_TRAINED_WEIGHTS,
        )
    with torch.random.fork_rng(devices=[]):
        model = factory()
    state = torch.load(path, map_location="cpu", weights_only=True)
    own = model.state_dict()
    widened = {key: value.to(own[key].dtype) if key in own else value
               for key, value in state.items()}
    try:
        model.load_state_dict(widened, strict=True)
    except RuntimeError as exc:
        raise ModelLoadError(
            f"the trained weights '{path}' do not fit the model's layout",
            context=str(exc).splitlines()[0],
            hint="the weights and the code come from different versions: reinstall edgefuse, "
                 "or train them again",
            reference=Ref.TRAINED_WEIGHTS_MISMATCH,
        ) from None
    return model.eval()


def _randomize(model: nn.Module, generator: torch.Generator) -> None:
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)) and module.weight.requires_grad:
            fan_in = module.weight[0].numel()
            module.weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=generator)
        elif isinstance(module, nn.BatchNorm2d):
            channels = module.num_features
            module.running_mean.copy_(0.1 * torch.randn(channels, generator=generator))
            module.running_var.copy_(0.5 + 1.5 * torch.rand(channels, generator=generator))
            module.weight.copy_(0.5 + torch.rand(channels, generator=generator))
            module.bias.copy_(0.1 * torch.randn(channels, generator=generator))


def _calibrate(model: nn.Module, example: torch.Tensor) -> None:
    handles = [
        module.register_forward_hook(_rescale_to_unit_rms)
        for module in model.modules()
        if isinstance(module, (nn.Conv2d, nn.Linear)) and module.weight.requires_grad
    ]
    try:
        model(example)
    finally:
        for handle in handles:
            handle.remove()


def _rescale_to_unit_rms(
    module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor
) -> torch.Tensor:
    """Scale the weight so the bias-free output has unit RMS; hand on the rescaled output."""
    bias = module.bias
    if bias is not None:
        bias = bias.view(1, -1, 1, 1) if output.dim() == 4 else bias
        output = output - bias
    rms = output.pow(2).mean().sqrt()
    scale = TARGET_RMS / rms if float(rms) > 0 else torch.ones(())
    module.weight.mul_(scale)
    output = output * scale
    return output if bias is None else output + bias
