"""Upload a trained hf_tlaser folder (model, code, tokenizer, sentence-transformers files, model card) to the Hub."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from huggingface_hub import CommitInfo, HfApi, constants, get_token
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id

from hf_tlaser.encoding import model_languages
from hf_tlaser.errors import UsageError
from hf_tlaser.model_folders import check_model_folder
from hf_tlaser.models.common.st_folder import add_sentence_transformers_files, read_model_config

from .model_card import write_model_card

T = TypeVar("T")

# training by-products that do not belong in a model repository
IGNORE_PATTERNS = ["checkpoint-*", "checkpoint-*/**", "runs/**", "*.pt", "*.pth", "training_args.bin", ".*"]


NO_ST_LAYOUT = (
    "--normalize sets the Normalize module of the sentence-transformers files, and a cNV folder has none (each "
    "language has its own encoder); leave --normalize out and pass normalize=True to model.encode"
)


class MissingTokenError(UsageError):
    """No Hugging Face token: nothing was uploaded."""


def check_repo_id(repo_id: str) -> None:
    """Raise ``UsageError`` unless ``repo_id`` is a valid ``NAMESPACE/NAME`` model repository id."""
    example = "use NAMESPACE/NAME (your user or organisation, then the model name), e.g. my-org/ct-laser-tiny"
    if repo_id.count("/") != 1:
        raise UsageError(f"REPO_ID {repo_id!r} is not a repository id: {example}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise UsageError(f"REPO_ID {repo_id!r} is not valid: {str(error).splitlines()[0]}") from error


def _network_errors() -> tuple[type[BaseException], ...]:
    """Connection errors of the HTTP client of the installed huggingface_hub (requests: OSError; httpx/httpx2)."""
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(module).TransportError)
        except ImportError:
            continue
    return tuple(errors)


def _hub_call(endpoint: str, call: Callable[[], T]) -> T:
    """Run a Hub request; an unreachable endpoint or an HTTP error becomes a one-line ``UsageError``."""
    try:
        return call()
    except HfHubHTTPError as error:
        raise UsageError(f"the Hub at {endpoint} refused the request: {str(error).splitlines()[0]}") from error
    except _network_errors() as error:
        raise UsageError(
            f"cannot reach the Hub at {endpoint} ({error}); check --endpoint / HF_ENDPOINT and the network"
        ) from error


def resolve_token(token: str | None = None) -> str:
    """``token``, else ``HF_TOKEN`` or the cached ``hf auth login`` token; raises ``MissingTokenError`` if none."""
    token = token or get_token()
    if not token:
        raise MissingTokenError(
            "no Hugging Face token: pass --token (token=...), set HF_TOKEN, or run `hf auth login`. "
            "Nothing was uploaded."
        )
    return token


def has_sentence_transformers_layout(config: dict, normalize: bool | None = None) -> bool:
    """Whether a model of ``config`` gets sentence-transformers files: not one with an encoder per language (cNV),
    for which ``normalize`` (a setting of those files) is a ``UsageError``."""
    if model_languages(config) is None:
        return True
    if normalize is not None:
        raise UsageError(NO_ST_LAYOUT)
    return False


def prepare_folder(
    model_dir: str | os.PathLike,
    repo_id: str | None = None,
    normalize: bool | None = None,
    results: str | os.PathLike | None = None,
) -> None:
    """Write what a Hub repository needs: the sentence-transformers files (``normalize``: add or remove the
    Normalize module; None keeps the folder's choice) and the generated ``README.md``.

    A model with one encoder and tokenizer per language (cNV) gets no sentence-transformers files: those run one
    encoder for every input. ``normalize`` is then a ``UsageError``.
    """
    if has_sentence_transformers_layout(read_model_config(model_dir), normalize):
        add_sentence_transformers_files(model_dir, normalize=normalize)
    write_model_card(model_dir, repo_id=repo_id, results=results)


def push_to_hub(
    model_dir: str | os.PathLike,
    repo_id: str,
    *,
    private: bool | None = None,
    revision: str | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    normalize: bool | None = None,
    results: str | os.PathLike | None = None,
    endpoint: str | None = None,
) -> CommitInfo:
    """Create ``repo_id`` if needed (an existing repository is updated) and upload ``model_dir`` in one commit.

    The repository id, the folder and the token are checked, and the repository is created, before anything is
    written into the folder (``UsageError`` otherwise). The generated model card is rewritten on every push with the
    latest evaluation (a card the user wrote is kept). ``revision`` names the branch to commit to (created from the
    default branch when missing). ``endpoint`` defaults to ``HF_ENDPOINT`` / huggingface.co.
    """
    check_repo_id(repo_id)
    folder = Path(model_dir)
    has_sentence_transformers_layout(check_model_folder(folder), normalize)
    if results is not None and not Path(results).is_file():
        raise UsageError(f"--results {str(results)!r} does not exist; pass a results.json of `hf-tlaser evaluate`")
    api = HfApi(endpoint=endpoint, token=resolve_token(token))
    url = endpoint or constants.ENDPOINT
    _hub_call(url, lambda: api.create_repo(repo_id, private=private, exist_ok=True))
    if revision is not None:
        _hub_call(url, lambda: api.create_branch(repo_id, branch=revision, exist_ok=True))
    prepare_folder(folder, repo_id=repo_id, normalize=normalize, results=results)
    return _hub_call(
        url,
        lambda: api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=revision,
            commit_message=commit_message or f"Upload {folder.name} with hf_tlaser",
            ignore_patterns=IGNORE_PATTERNS,
        ),
    )
