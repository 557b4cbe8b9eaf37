"""Where a model's config files come from: one chain that answers "what is this model".

`--model-path` is a local folder more rarely than a hub id (`deepseek-ai/DeepSeek-V3`). Upstream
SGLang reads a hub id's config files from the Hugging Face cache, or downloads them; Accord asks
the same places, in this order, and the first that has the model's config answers:

1. a local folder (or GGUF file), or a built-in name (`tiny-llama`, `smollm2`);
2. the Hugging Face cache (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`),
   at `--revision` (a branch or tag through `refs/`, or a commit);
3. the hub, for the small JSON files only (`accord.resolver.facts.hub_download`), never with
   `HF_HUB_OFFLINE=1`; they land in the cache as upstream's own download would put them;
4. a built-in model card: a copy of the repository's own files under `rules/models/cards/`;
5. otherwise the model is unknown, and the rules that need its facts say they were not checked.

The answer is a `ModelSource`: what answered (its provenance, with the revision) and a way to read
the answering files. Facts are computed from those files alone (`accord.resolver.facts.model`), so
the same files give the same facts whichever source held them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.language.yamlcache import read_yaml_files
# The one file that makes a folder a model of each system, and how a model of the other system is
# refused, are hub_download's too (it imports huggingface_hub only when it downloads).
from accord.resolver.facts.hub_download import CONFIG_FILE, other_system, wrong_system_message
from accord.resolver.untrusted import MODEL_FILE_LIMIT, read_json_object
from accord.rules.models.location import BUILTIN_NAMES, DEFAULT_NAME, gguf_file, local_path
from accord.rules.paths import MODELS_DIR

CARDS_DIR = MODELS_DIR / "cards"
BUILTIN_MODELS = {"llm": MODELS_DIR / "tiny-llama", "diffusion": MODELS_DIR / "tiny-dit"}

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """The place that answered for a `--model-path`, and its files.

    `kind` is one of: folder, gguf, built-in, hf-cache, hub, card. A card's files are held in
    memory (`files`); every other source's files are read from `folder` on demand."""

    kind: str
    name: str
    repo: str | None = None
    revision: str | None = None
    location: str | None = None
    folder: Path | None = None
    files: Mapping[str, Any] | None = None

    def read(self, name: str) -> dict[str, Any] | None:
        """One JSON file of the model (None when the source has no such file)."""
        if self.files is not None:
            return self.files.get(name)
        if self.folder is None or not (self.folder / name).is_file():
            return None
        return read_json_object(self.folder / name, MODEL_FILE_LIMIT,
                                f"point --model-path at another folder, or remove the file from {self.folder}")

    def describe(self) -> str:
        """One line for a report: which source answered, with the revision."""
        revision = f" at revision {self.revision}" if self.revision else ""
        if self.kind == "hf-cache":
            return f"{self.repo} from the Hugging Face cache{revision} ({self.location})"
        if self.kind == "hub":
            return f"{self.repo} from the Hugging Face hub{revision} (its config files, now in the cache)"
        if self.kind == "card":
            revision = revision or " (hub revision not recorded)"
            return f"{self.repo} from Accord's built-in model card{revision}: a copy of the repository's own files"
        if self.kind == "built-in":
            return f"built-in model {self.name} ({self.location})"
        return f"local {'GGUF file' if self.kind == 'gguf' else 'folder'} {self.location}"

    def to_dict(self) -> dict[str, Any]:
        """Provenance for `--json`: kind, name, repo, revision and location (nulls kept)."""
        return {"kind": self.kind, "name": self.name, "repo": self.repo, "revision": self.revision,
                "location": self.location}


@dataclasses.dataclass(frozen=True)
class ModelLookup:
    """What the chain found: a source (None when nothing answered) and what the user should know
    about it (a warning, e.g. that the model is unknown and its rules were not checked)."""

    source: ModelSource | None
    note: str | None = None


def find_model(model_path: str | None, system: str, revision: str | None = None) -> ModelLookup:
    """Ask the sources in order (module docstring). Raises UsageError for a path that cannot be a
    model (a folder without the config, an unreadable file) and for a repository the hub refuses.

    A command asks several times (facts for each preset, then provenance for the report), so the
    answer for a hub id is kept for the process, keyed by everything it depends on (the HF_*
    variables): a hub that did not answer is asked once, not once a preset."""
    if model_path is None:
        folder = BUILTIN_MODELS[system]
        return ModelLookup(ModelSource("built-in", folder.name, location=str(folder), folder=folder))
    if not model_path.strip():
        raise UsageError("--model-path is empty; give a local model folder or a hub id such as org/name.")
    local = _local_source(model_path, system)
    if local is not None:
        return ModelLookup(local)
    key = (model_path, system, revision, str(hub_cache_dir()), hub_offline(),
           os.environ.get("HF_ENDPOINT"), os.environ.get("HF_TOKEN"))
    if key not in _REMOTE_LOOKUPS:
        _REMOTE_LOOKUPS[key] = _find_remote(model_path, system, revision)
    return _REMOTE_LOOKUPS[key]


_REMOTE_LOOKUPS: dict[tuple, ModelLookup] = {}


def _find_remote(model_path: str, system: str, revision: str | None) -> ModelLookup:
    """Sources 2 to 5 for a --model-path that is not a local path."""
    config = CONFIG_FILE[system]
    if not (HUB_ID.fullmatch(model_path) and not model_path.startswith((".", "~"))):
        # A path of the machine the command is for (resolving here for another host is normal use).
        return ModelLookup(None, f"--model-path {model_path} does not exist on this machine, so the model's "
                                 f"facts are unknown and rules that need them are not checked; give them with "
                                 f"--fact model.KEY=VALUE or resolve where the folder exists.")
    cached = cached_snapshot(model_path, revision, config)
    if cached is not None:
        return ModelLookup(cached)
    hub_note = None
    if not hub_offline():
        from accord.resolver.facts.hub_download import HubUnreachable, download_config_files

        try:
            folder = download_config_files(model_path, revision, system, hub_cache_dir())
            return ModelLookup(ModelSource("hub", model_path, repo=model_path, revision=folder.name,
                                           location=str(folder), folder=folder))
        except HubUnreachable as err:
            hub_note = str(err)
    card = model_card(model_path, system)
    if card is not None:
        note = None
        if revision is not None and revision != card.revision:
            note = (f"--revision {revision} of {card.repo} is not in the Hugging Face cache, so its facts come "
                    f"from Accord's built-in card (hub revision {card.revision or 'not recorded'}); download that "
                    f"revision for a check against it.")
        return ModelLookup(card, note)
    _refuse_other_system(model_path, system, revision)
    where = hub_note or ("HF_HUB_OFFLINE is set" if hub_offline() else "the hub did not answer")
    return ModelLookup(None, (
        f"--model-path {model_path} is a hub id that is neither in the Hugging Face cache ({hub_cache_dir()}) "
        f"nor one of Accord's built-in model cards, and {where}; so the model's facts (architecture, "
        f"heads, context length) are unknown and rules that need them are not checked. Download its config "
        f"(`hf download {model_path} config.json`) or pass a local folder for a full check."))


def _refuse_other_system(repo: str, system: str, revision: str | None) -> None:
    """A hub id the cache or a card knows as a model of the other system is a usage error that says
    which --system to give, not an unknown model."""
    other = other_system(system)
    if cached_file(repo, revision, CONFIG_FILE[other]) is not None or model_card(repo, other) is not None:
        raise UsageError(wrong_system_message(repo, system))


def _local_source(model_path: str, system: str) -> ModelSource | None:
    """A built-in name, a GGUF file, or a model folder on this machine (None: not a local path).
    A local path that is not a model of this system is an error: it was clearly meant as one."""
    config = CONFIG_FILE[system]
    if model_path in BUILTIN_NAMES or model_path == DEFAULT_NAME:
        found = local_path(model_path)
        if found is not None and not Path(model_path).expanduser().exists():
            gguf = gguf_file(found) if system == "llm" else None
            kind = "gguf" if gguf is not None else "built-in"
            return ModelSource(kind, model_path, location=str(gguf or found), folder=found)
    path = Path(model_path).expanduser()
    if path.is_dir():
        gguf = gguf_file(path) if system == "llm" else None
        if gguf is not None:
            return ModelSource("gguf", model_path, location=str(gguf), folder=path)
        if (path / config).is_file():
            return ModelSource("folder", model_path, location=str(path), folder=path)
        raise UsageError(f"--model-path {model_path} is a folder without {config}, so it is not a model folder "
                         f"of the {system} server; point it at the folder that holds {config} (and the weights).")
    if path.is_file():
        if path.suffix == ".gguf" and system == "llm":
            return ModelSource("gguf", model_path, location=str(path), folder=path.parent)
        raise UsageError(f"--model-path {model_path} is a file; point it at the model folder that holds "
                         f"{config}{' (or at a .gguf file)' if system == 'llm' else ''}.")
    return None


# --- the Hugging Face cache ----------------------------------------------------------------------

def hub_offline() -> bool:
    """`HF_HUB_OFFLINE` as huggingface_hub reads it: 1, true, yes or on (any case) means offline."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_cache_dir() -> Path:
    """The cache folder huggingface_hub uses: HF_HUB_CACHE (or its old name HUGGINGFACE_HUB_CACHE),
    else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = Path(os.environ["XDG_CACHE_HOME"]).expanduser() if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def cached_file(repo: str, revision: str | None, filename: str) -> tuple[Path, str] | None:
    """(path, commit) of one file of a repo in the cache at a revision, or None.

    The cache keeps each commit's files under `models--ORG--NAME/snapshots/<commit>/` and each
    branch or tag's commit in `refs/<name>`; a revision may also be the commit itself. This reads
    that layout directly instead of importing huggingface_hub (a fifth of a second on every hub
    id); tests/test_model_sources.py holds it to `huggingface_hub.try_to_load_from_cache`."""
    repo_dir = hub_cache_dir() / f"models--{repo.replace('/', '--')}"
    wanted = revision or "main"
    ref = repo_dir / "refs" / wanted
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8", errors="replace").strip()
    elif _COMMIT.fullmatch(wanted):
        commit = wanted
    else:
        return None
    path = repo_dir / "snapshots" / commit / filename
    return (path, commit) if _COMMIT.fullmatch(commit) and path.is_file() else None


def cached_snapshot(repo: str, revision: str | None, config: str) -> ModelSource | None:
    """The cache's snapshot of `repo` at `revision` when it holds the model's config file."""
    found = cached_file(repo, revision, config)
    if found is None:
        return None
    path, commit = found
    return ModelSource("hf-cache", repo, repo=repo, revision=commit, location=str(path.parent), folder=path.parent)


# --- built-in model cards ------------------------------------------------------------------------

def card_path(repo: str) -> Path | None:
    """The card file of a hub id, matched without regard to case (the hub's ids are not), else the
    card of the id the hub redirects it to or from (`rules/models/renamed.yaml`)."""
    for name in (repo, *_same_repository().get(repo.lower(), ())):
        found = _card_file(name)
        if found is not None:
            return found
    return None


def _card_file(repo: str) -> Path | None:
    exact = CARDS_DIR / f"{repo.replace('/', '--')}.json"
    if exact.is_file():
        return exact
    wanted = exact.name.lower()
    return next((path for path in sorted(CARDS_DIR.glob("*.json")) if path.name.lower() == wanted), None)


@functools.lru_cache(maxsize=1)
def _same_repository() -> dict[str, tuple[str, ...]]:
    """Lower-cased hub id -> the other ids of the same repository (renamed.yaml's pairs)."""
    ((data,),) = read_yaml_files([MODELS_DIR / "renamed.yaml"])
    others: dict[str, tuple[str, ...]] = {}
    for pair in data["same_repository"]:
        for name in pair:
            others[name.lower()] = tuple(other for other in pair if other != name)
    return others


def model_card(repo: str, system: str) -> ModelSource | None:
    """The built-in card of a hub id for this system (None: no card, or a card of the other system)."""
    path = card_path(repo)
    if path is None:
        return None
    card = json.loads(path.read_text(encoding="utf-8"))  # shipped data, checked by tests/test_model_cards.py
    if card.get("system", "llm") != system or CONFIG_FILE[system] not in card["files"]:
        return None
    return ModelSource("card", repo, repo=card["repo"], revision=card.get("revision"),
                       location=str(path), files=card["files"])


def card_systems() -> dict[str, str]:
    """Hub id -> system of every built-in card, sorted by hub id (reads every card)."""
    found = {}
    for path in sorted(CARDS_DIR.glob("*.json")):
        card = json.loads(path.read_text(encoding="utf-8"))
        found[card["repo"]] = card.get("system", "llm")
    return dict(sorted(found.items()))
