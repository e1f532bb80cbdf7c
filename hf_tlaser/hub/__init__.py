"""Publishing: sentence-transformers layout, model cards and ``hf-tlaser push``."""

from .model_card import render_model_card, write_model_card
from .push import MissingTokenError, push_to_hub
from .st_layout import add_sentence_transformers_files

__all__ = [
    "MissingTokenError",
    "add_sentence_transformers_files",
    "push_to_hub",
    "render_model_card",
    "write_model_card",
]
