"""Where the networks' weights come from: a component's safetensors file, else seeded dummy weights.

Each component is first built at full size (tensor-parallel size 1) so its weights are the same
whatever the layout; the transformer is then cut to this rank's tensor-parallel slice.
"""

from __future__ import annotations

import torch.nn as nn

from accord.engine.diffusion.model import ByteTextEncoder, LatentDecoder, TinyDiT, seeded_init, shard_state_dict
from accord.engine.diffusion.spec import ModelSpec
from accord.resolver.errors import UsageError


def _fill(module: nn.Module, spec: ModelSpec, component: str) -> nn.Module:
    path = spec.weights_file(component)
    if path is None:
        seeded_init(module, int(getattr(spec, component)["seed"]))
        return module
    from safetensors.torch import load_file

    try:
        module.load_state_dict(load_file(str(path)), strict=True)
    except (RuntimeError, OSError) as err:
        first_line = str(err).strip().splitlines()[0]
        raise UsageError(f"{path} does not hold {component} weights matching {component}/config.json: "
                         f"{first_line}") from None
    return module


def load_networks(spec: ModelSpec, tp_rank: int = 0, tp_size: int = 1) -> dict[str, nn.Module]:
    """The text encoder, this rank's transformer slice and the decoder, in eval mode."""
    full = _fill(TinyDiT(spec.transformer), spec, "transformer")
    transformer = full if tp_size == 1 else TinyDiT(spec.transformer, tp_size)
    if tp_size > 1:
        transformer.load_state_dict(shard_state_dict(full.state_dict(), tp_rank, tp_size), strict=True)
    networks = {
        "text_encoder": _fill(ByteTextEncoder(spec.text_encoder), spec, "text_encoder"),
        "transformer": transformer,
        "vae": _fill(LatentDecoder(spec.vae), spec, "vae"),
    }
    for module in networks.values():
        module.eval().requires_grad_(False)
    return networks
