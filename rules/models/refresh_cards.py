"""Refresh the built-in model cards in `cards/` from the Hugging Face hub.

A card (`cards/ORG--NAME.json`) holds a model repository's own small JSON files (config.json,
hf_quant_config.json, model_index.json and component configs, ...) so that Accord can resolve a
launch for a hub id without downloading anything. The first cards were copied from public GitHub
repositories that vendor those files; each records where its files came from. This script replaces
them with the hub's current files, pinned to the commit it read, so a card can be checked and
brought up to date with one command:

    python -m accord.rules.models.refresh_cards              # every card in the folder
    python -m accord.rules.models.refresh_cards Qwen/Qwen3-8B black-forest-labs/FLUX.1-dev

A repo named on the command line that has no card yet gets one. Only the small JSON files below are
downloaded, never weights. HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE work as in huggingface_hub. The
exit status is 2 when the hub cannot be reached and 1 when some card could not be refreshed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CARDS_DIR = Path(__file__).resolve().parent / "cards"
TOP_LEVEL = ("config.json", "hf_quant_config.json", "generation_config.json",
             "quantize_config.json", "quant_config.json", "model_index.json")
COMPONENT = ("config.json", "scheduler_config.json")  # diffusion: transformer/config.json, ...


def card_path(repo: str) -> Path:
    return CARDS_DIR / (repo.replace("/", "--") + ".json")


def write_card(card: dict) -> None:
    text = json.dumps(card, sort_keys=True, separators=(",", ":")) + "\n"
    card_path(card["repo"]).write_text(text, encoding="utf-8")


def wanted_files(siblings: list[str]) -> list[str]:
    """For a new card: the repo's small config files, with diffusion component configs."""
    names = [f for f in siblings if f in TOP_LEVEL]
    if "model_index.json" in names:
        names += [f for f in siblings if f.count("/") == 1 and f.split("/")[1] in COMPONENT]
    return sorted(names)


def refresh(huggingface_hub, api, repo: str) -> str:
    """Rewrite one card from the hub; returns the line to print."""
    info = api.model_info(repo)
    sha = info.sha
    old = card_path(repo)
    if old.exists():
        names = sorted(json.loads(old.read_text(encoding="utf-8"))["files"])
    else:
        names = wanted_files([s.rfilename for s in info.siblings or []])
    if not names:
        raise LookupError("no config files in the repo")
    files = {}
    for name in names:
        local = huggingface_hub.hf_hub_download(repo, name, revision=sha)
        data = json.loads(Path(local).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{name} is not a JSON object")
        files[name] = data
    write_card({
        "repo": repo,
        "system": "diffusion" if "model_index.json" in files else "llm",
        "revision": sha,
        "files": files,
        "sources": {name: f"hub:{repo}@{sha}:{name}" for name in files},
    })
    return f"{repo}@{sha}: {', '.join(files)}"


def main(argv: list[str] | None = None) -> int:
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    args = sys.argv[1:] if argv is None else argv
    repos = args or sorted(json.loads(p.read_text(encoding="utf-8"))["repo"]
                           for p in CARDS_DIR.glob("*.json"))
    api = huggingface_hub.HfApi()
    failed = 0
    for repo in repos:
        try:
            print(refresh(huggingface_hub, api, repo))
        except (RepositoryNotFoundError, EntryNotFoundError, LookupError, ValueError) as exc:
            # The hub answered: the repo is missing, gated or private, or lacks a listed file.
            print(f"{repo}: not refreshed: {type(exc).__name__}: {exc}")
            failed += 1
        except Exception as exc:  # DNS, connection, proxy, HF_HUB_OFFLINE=1, server errors
            print(f"refresh_cards: cannot reach the Hugging Face hub "
                  f"({huggingface_hub.constants.ENDPOINT}): {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
