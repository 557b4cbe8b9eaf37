"""Fetching a model's small config files from the Hugging Face hub, never its weights.

Only `find_model` calls this, and only when `HF_HUB_OFFLINE` is unset and the cache lacks the model.
It asks the hub for the repository's file list once, then downloads, through `huggingface_hub` (so
`HF_TOKEN`, `HF_ENDPOINT` and the cache layout are the library's), just the JSON files upstream
SGLang reads to decide a launch: the model config, the generation config and the quantization
files (`hf_quant_config.json` for ModelOpt, `quantize_config.json` / `quant_config.json` for
GPTQ and AWQ, ...); for a diffusion pipeline, `model_index.json` and each component's config. They
land in the Hugging Face cache, where the next run (and upstream itself) finds them offline.

A gated, private or missing repository is an error naming the repository and how to log in; a hub
that cannot be reached within a few seconds is not (the chain goes on to the built-in cards).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from accord.resolver.errors import UsageError

# The file that makes a folder a model of each system (model_sources reads it from here).
CONFIG_FILE = {"llm": "config.json", "diffusion": "model_index.json"}

# Seconds to wait for the hub: a resolver answers in about a second, so a slow or unreachable hub
# must not hold it for long (huggingface_hub's own default is 10 s per request).
TIMEOUT_S = 5.0

LLM_FILES = ("config.json", "generation_config.json", "hf_quant_config.json", "quantize_config.json",
             "quant_config.json", "quantization_config.json", "quant_model_description.json",
             "model.safetensors.index.json")
# A diffusion component's config: `<component>/config.json`, or the scheduler's own file name.
DIFFUSION_COMPONENT_FILES = ("config.json", "scheduler_config.json")
LARGEST_FILE = 32 << 20  # the safetensors index of a large checkpoint is about 10 MB


class HubUnreachable(Exception):
    """The hub did not answer in time (or at all): the chain goes on to the built-in cards."""


def wanted_files(system: str, listing: dict[str, int | None]) -> list[str]:
    """The files of `listing` (path -> size) that describe the model, sorted; never weights."""
    if system == "llm":
        names = [name for name in LLM_FILES if name in listing]
    else:
        names = [name for name in listing
                 if name == "model_index.json" or (len(PurePosixPath(name).parts) == 2
                                                   and PurePosixPath(name).name in DIFFUSION_COMPONENT_FILES)]
    return sorted(name for name in names if (listing[name] or 0) <= LARGEST_FILE)


def download_config_files(repo: str, revision: str | None, system: str, cache_dir: Path) -> Path:
    """Download the config files of `repo` at `revision` into the cache at `cache_dir`; the snapshot
    folder they form (named by its commit)."""
    import huggingface_hub
    from huggingface_hub import errors

    api = huggingface_hub.HfApi()
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True, timeout=TIMEOUT_S)
        listing = {sibling.rfilename: sibling.size for sibling in info.siblings or ()}
        if CONFIG_FILE[system] not in listing:
            raise UsageError(_not_a_model(repo, system, listing))
        folder = None
        for name in wanted_files(system, listing):
            # By the revision asked for (main when none), not the commit, so the cache records
            # the branch's commit in refs/ and the next run finds the files offline.
            path = Path(huggingface_hub.hf_hub_download(repo, name, revision=revision,
                                                        etag_timeout=TIMEOUT_S, cache_dir=cache_dir))
            folder = path.parents[len(PurePosixPath(name).parts) - 1]
    except errors.GatedRepoError:
        raise UsageError(_login_message(repo, "is gated: its files are shown only to accounts that accepted "
                                              "its terms")) from None
    except errors.RepositoryNotFoundError:
        raise UsageError(_login_message(repo, "was not found on the hub (or is private)")) from None
    except errors.RevisionNotFoundError:
        raise UsageError(f"--revision {revision} does not exist in {repo} on the Hugging Face hub; give a branch, "
                         f"tag or commit of that repository, or drop --revision for its main branch.") from None
    except errors.HfHubHTTPError as err:
        raise HubUnreachable(f"the Hugging Face hub answered {repo} with an error ({_first_line(err)})") from None
    except _transport_errors() as err:  # connection refused, timed out, DNS, TLS
        raise HubUnreachable(f"the Hugging Face hub could not be reached ({_first_line(err)})") from None
    return folder


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of a request that never got an answer. huggingface_hub lets its HTTP
    client's own errors through, and that client has changed between releases (requests, httpx,
    httpx2), so each one installed is caught."""
    import importlib

    found: list[type[BaseException]] = [OSError, TimeoutError]
    for module, name in (("httpx", "TransportError"), ("httpx2", "TransportError"),
                         ("requests", "RequestException")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _login_message(repo: str, what: str) -> str:
    return (f"--model-path {repo} {what}. If the name is right, log in to the Hugging Face hub with an account "
            f"that may read it (`hf auth login`, or set HF_TOKEN to an access token) and accept the model's terms "
            f"on its page; or pass a local folder that holds its config.json. Check the spelling otherwise: hub "
            f"ids are ORG/NAME.")


def other_system(system: str) -> str:
    return next(name for name in CONFIG_FILE if name != system)


def wrong_system_message(repo: str, system: str) -> str:
    """A model of the other system was named: which --system to give (every source says it so)."""
    other = other_system(system)
    return (f"--model-path {repo} is a {other} model (it has {CONFIG_FILE[other]}, not "
            f"{CONFIG_FILE[system]}); add --system {other}.")


def _not_a_model(repo: str, system: str, listing: dict[str, int | None]) -> str:
    if CONFIG_FILE[other_system(system)] in listing:
        return wrong_system_message(repo, system)
    return (f"--model-path {repo} has no {CONFIG_FILE[system]} on the Hugging Face hub, so it is not a model "
            f"the {system} server can load; check the repository id.")
