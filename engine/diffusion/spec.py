"""The model a diffusion server runs, read from a diffusers-style folder (plain JSON, no torch).

A folder holds `model_index.json` (its `_class_name` names the pipeline; `_sampling` holds the
request defaults) and one sub-folder per component with a `config.json` (the scheduler's is
`scheduler_config.json`). With no `--model-path` the built-in tiny DiT in `rules/models/tiny-dit/`
is served with dummy weights drawn from the seeds in its configs; a folder of the same layout may
add `<component>/diffusion_pytorch_model.safetensors` to supply real weights.

The built-in engine runs exactly one pipeline class, so any other folder (or a hub id, which it
cannot download) is refused with a message saying so.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from accord.resolver.errors import UsageError
from accord.rules.paths import MODELS_DIR

BUILTIN_MODEL_DIR = MODELS_DIR / "tiny-dit"
PIPELINE_CLASS = "TinyDiTPipeline"
COMPONENTS = ("transformer", "text_encoder", "vae", "scheduler")
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Component configs of one pipeline folder, plus the request defaults it declares."""

    folder: Path
    builtin: bool
    name: str
    transformer: dict[str, Any]
    text_encoder: dict[str, Any]
    vae: dict[str, Any]
    scheduler: dict[str, Any]
    sampling: dict[str, Any]

    @property
    def pixel_granularity(self) -> int:
        """Image sides must be multiples of this: one transformer token covers this many pixels."""
        return int(self.vae["downsample_factor"]) * int(self.transformer["patch_size"])

    @property
    def max_text_tokens(self) -> int:
        """Longest prompt the text encoder can embed, counting its leading start token."""
        return int(self.text_encoder["max_position_embeddings"])

    @property
    def max_image_tokens(self) -> int:
        """Most latent patches one image may have (bounds the attention's memory)."""
        return int(self.transformer["max_image_tokens"])

    @property
    def num_attention_heads(self) -> int:
        return int(self.transformer["num_attention_heads"])

    def weights_file(self, component: str) -> Path | None:
        """The component's safetensors file, or None when it runs on seeded dummy weights."""
        path = self.folder / component / WEIGHTS_FILE
        return path if path.is_file() else None

    def describe(self) -> dict[str, Any]:
        """What /server_info shows about the model."""
        return {
            "name": self.name,
            "folder": str(self.folder),
            "builtin": self.builtin,
            "pipeline": PIPELINE_CLASS,
            "weights": {c: ("safetensors" if self.weights_file(c) else "dummy (seeded)")
                        for c in ("transformer", "text_encoder", "vae")},
            "sampling_defaults": dict(self.sampling),
        }


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{path} is missing: a {PIPELINE_CLASS} folder needs model_index.json and a "
                         f"config in each of {', '.join(c + '/' for c in COMPONENTS)}.") from None
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(f"cannot read {path}: {err}. Fix or replace the file.") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a JSON object, not {type(data).__name__}.")
    return data


def load_model_spec(model_path: str | None) -> ModelSpec:
    """Read the pipeline folder named by `--model-path` (None: the built-in tiny DiT)."""
    builtin = model_path is None
    folder = BUILTIN_MODEL_DIR if builtin else Path(model_path).expanduser()
    if not folder.is_dir():
        raise UsageError(
            f"--model-path {model_path!r} is not a local folder. The built-in diffusion engine serves "
            f"{PIPELINE_CLASS} folders (model_index.json plus component configs) and never downloads "
            f"models; omit --model-path to serve the built-in tiny DiT.")
    index = _read_json(folder / "model_index.json")
    pipeline = index.get("_class_name")
    if pipeline != PIPELINE_CLASS:
        raise UsageError(
            f"{folder / 'model_index.json'} declares pipeline {pipeline!r}; the built-in diffusion engine "
            f"runs only {PIPELINE_CLASS}. Omit --model-path to serve the built-in tiny DiT.")
    configs = {c: _read_json(folder / c / ("scheduler_config.json" if c == "scheduler" else "config.json"))
               for c in COMPONENTS}
    return ModelSpec(folder=folder, builtin=builtin, name=str(index.get("_name_or_path") or folder.name),
                     sampling=dict(index.get("_sampling") or {}), **configs)
