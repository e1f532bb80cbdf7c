"""Publishing: sentence-transformers layout, model cards and ``hf-tlaser push``."""

from hf_tlaser.models.common.st_folder import add_sentence_transformers_files

from .model_card import render_model_card, write_model_card
from .push import MissingTokenError, push_to_hub

__all__ = [
    "MissingTokenError",
    "add_sentence_transformers_files",
    "push_to_hub",
    "render_model_card",
    "write_model_card",
]
