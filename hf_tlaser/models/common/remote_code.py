"""The one ``save_pretrained`` of every hf_tlaser model, which leaves a self-contained ``trust_remote_code`` folder.

A family's model file imports the shared modules from ``..common`` (plain package imports). transformers copies a
registered model's module and the files it imports relatively into the folder, flat, and on loading follows the
relative imports again (``get_relative_import_files``); it cannot follow ``..common``. So ``save_pretrained`` turns
that copy off and writes the code itself (``model_code``): the model file, its configuration and every shared
module it needs, each import made flat (``..common.losses`` becomes ``.losses``). A folder saved from a model that was
itself loaded from such a folder is written the same way (its imports are already flat).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from .encode import SentenceEncoderMixin
from .st_folder import add_sentence_transformers_files

RELATIVE_IMPORT = re.compile(r"^([ \t]*)from[ \t]+(\.+)((?:\w+\.)*)(\w+)[ \t]+import", re.MULTILINE)
"""A relative import: indent, the dots, the packages below them and the module."""
PUSH_KWARGS = ("repo_id", "commit_message", "commit_description", "private", "revision", "create_pr", "tags")
"""``save_pretrained(..., push_to_hub=True)`` arguments that ``ModelFolderMixin`` hands to ``push_to_hub``."""


def model_code(module_file: str | os.PathLike) -> dict[str, str]:
    """``{file name: source}`` of ``module_file`` and of every module it imports relatively, recursively, as a flat
    folder holds them: each relative import names its module with one dot."""
    sources: dict[str, str] = {}
    pending = [Path(module_file)]
    while pending:
        path = pending.pop()
        if path.name in sources:
            continue
        text = path.read_text(encoding="utf-8")
        sources[path.name] = RELATIVE_IMPORT.sub(r"\1from .\4 import", text)
        for _, dots, packages, module in RELATIVE_IMPORT.findall(text):
            folder = path.parent
            for _ in dots[1:]:
                folder = folder.parent
            pending.append(folder.joinpath(*packages.split(".")[:-1], f"{module}.py"))
    return sources


def write_model_code(model_class: type, save_directory: str | os.PathLike) -> list[Path]:
    """Write the code of ``model_class`` (``model_code`` of its module) into a saved folder; return the paths."""
    written = []
    for name, source in model_code(sys.modules[model_class.__module__].__file__).items():
        path = Path(save_directory) / name
        path.write_text(source, encoding="utf-8", newline="\n")
        written.append(path)
    return written


@contextlib.contextmanager
def transformers_code_copy_off(model_class: type) -> Iterator[str | None]:
    """Within the block ``model_class`` counts as registered for no auto class, so that transformers'
    ``save_pretrained`` copies no code (``write_model_code`` does); yields the auto class it is registered for."""
    own = "_auto_class" in vars(model_class)
    auto_class = model_class._auto_class
    model_class._auto_class = None
    try:
        yield auto_class
    finally:
        if own:
            model_class._auto_class = auto_class
        else:
            del model_class._auto_class


def share_weights(folder: str | os.PathLike) -> None:
    """Give the folder's ``*.safetensors`` the mode a new file gets here (0o666 less the umask), as its other files
    have: transformers writes them through a private temporary file (mode 600), so a shared folder's weights were
    unreadable to the users who could read the rest."""
    mask = os.umask(0)
    os.umask(mask)
    for path in Path(folder).glob("*.safetensors"):
        path.chmod(0o666 & ~mask)


class ModelFolderMixin:
    """First base of every family's ``PreTrainedModel``: the one ``save_pretrained`` (see ``save_pretrained``)."""

    def save_extra_files(self, save_directory: str | os.PathLike) -> None:
        """Files a family adds to its saved folder after the rest (cNV: each language's tokenizer); none here."""

    def save_pretrained(self, save_directory: str | os.PathLike, *args, push_to_hub: bool = False, **kwargs) -> None:
        """Save the model to a folder that loads with ``AutoModel.from_pretrained(folder, trust_remote_code=True)``
        where hf_tlaser is not installed, in this order:

        1. ``config.auto_map``: this class under its auto class and, for a training model around a sentence encoder
           (``self.encoder``), ``AutoModel`` under the encoder's class, so that ``AutoModel`` gives the embedding
           model;
        2. transformers' ``save_pretrained`` (weights, config, generation config) without its code copy;
        3. the code (``write_model_code``), on the main process;
        4. the sentence-transformers layout of the sentence encoder (``add_sentence_transformers_files``);
        5. the family's extra files (``save_extra_files``);
        6. with ``push_to_hub=True``, the upload through ``push_to_hub``, which saves the whole folder again before
           it uploads (transformers' own upload would run inside step 2, before the rest is written).
        """
        hub_kwargs = {name: kwargs.pop(name) for name in PUSH_KWARGS if name in kwargs} if push_to_hub else {}
        # under FSDP2 the model's class is the ``FSDP<name>`` class that ``fully_shard`` made, in a torch module
        cls = next(base for base in type(self).__mro__ if not base.__module__.startswith("torch."))
        encoder = self if isinstance(self, SentenceEncoderMixin) else getattr(self, "encoder", None)
        if not isinstance(encoder, SentenceEncoderMixin):
            encoder = None
        with transformers_code_copy_off(cls) as auto_class:
            if auto_class is not None:
                auto_map = dict(getattr(self.config, "auto_map", None) or {})
                if encoder is not None and encoder is not self:
                    auto_map["AutoModel"] = f"{type(encoder).__module__.rsplit('.', 1)[-1]}.{type(encoder).__name__}"
                auto_map[auto_class] = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
                self.config.auto_map = auto_map
            super().save_pretrained(save_directory, *args, **kwargs)
        if not kwargs.get("is_main_process", True):
            return
        share_weights(save_directory)
        if auto_class is not None:
            write_model_code(cls, save_directory)
        if encoder is not None:
            add_sentence_transformers_files(save_directory, normalize=None)
        self.save_extra_files(save_directory)
        if push_to_hub:
            repo_id = hub_kwargs.pop("repo_id", Path(save_directory).name)
            self.push_to_hub(repo_id, token=kwargs.get("token"), **hub_kwargs)
