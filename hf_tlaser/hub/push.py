"""Upload a trained hf_tlaser folder (model, code, tokenizer, sentence-transformers files, model card) to the Hub."""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import CommitInfo, HfApi, get_token

from .model_card import write_model_card
from .st_layout import add_sentence_transformers_files, has_sentence_transformers_files

# training by-products that do not belong in a model repository
IGNORE_PATTERNS = ["checkpoint-*", "checkpoint-*/**", "runs/**", "*.pt", "*.pth", "training_args.bin", ".*"]


class MissingTokenError(RuntimeError):
    """No Hugging Face token: nothing was uploaded."""


def resolve_token(token: str | None = None) -> str:
    """``token``, else ``HF_TOKEN`` or the cached ``hf auth login`` token; raises ``MissingTokenError`` if none."""
    token = token or get_token()
    if not token:
        raise MissingTokenError(
            "no Hugging Face token: pass --token (token=...), set HF_TOKEN, or run `hf auth login`. "
            "Nothing was uploaded."
        )
    return token


def prepare_folder(
    model_dir: str | os.PathLike,
    repo_id: str | None = None,
    normalize: bool = False,
    results: str | os.PathLike | None = None,
) -> None:
    """Add what a Hub repository needs and the folder lacks: the sentence-transformers files and ``README.md``."""
    if not has_sentence_transformers_files(model_dir):
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
    normalize: bool = False,
    results: str | os.PathLike | None = None,
    endpoint: str | None = None,
) -> CommitInfo:
    """Create ``repo_id`` if needed (an existing repository is updated) and upload ``model_dir`` in one commit.

    The token is checked before anything is written or sent. ``revision`` names the branch to commit to (created
    from the default branch when missing). ``endpoint`` defaults to ``HF_ENDPOINT`` / huggingface.co.
    """
    folder = Path(model_dir)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} is not a saved model folder (no config.json)")
    api = HfApi(endpoint=endpoint, token=resolve_token(token))
    prepare_folder(folder, repo_id=repo_id, normalize=normalize, results=results)
    api.create_repo(repo_id, private=private, exist_ok=True)
    if revision is not None:
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id,
        folder_path=folder,
        revision=revision,
        commit_message=commit_message or f"Upload {folder.name} with hf_tlaser",
        ignore_patterns=IGNORE_PATTERNS,
    )
