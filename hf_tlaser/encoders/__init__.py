"""One embedding layer: every model SPEC (an hf_tlaser folder, a sentence-transformers folder or Hub id, a
``vectors:`` file; on any backend) loads into an :class:`Encoder` with one ``encode(texts)``, its ``fingerprint``
beside it. ``hf-tlaser embed``, ``mine``, ``evaluate`` and the teachers all go through it.

    encoder = load("runs/demo/model")  # UsageError naming --model before any data is read
    vectors = encoder.encode(["Hello world.", "Hallo Welt."])  # float32 [2, encoder.dim]
"""

from .base import Encoder
from .folder import HfTlaserEncoder
from .identity import cache_root, card_languages, folder_fingerprint
from .loading import SPEC_HELP, load, vector_width
from .st import SentenceTransformerEncoder
from .vectors import VECTORS_PREFIX, VectorsEncoder, text_keys, texts_digest, write_vectors

__all__ = [
    "SPEC_HELP",
    "VECTORS_PREFIX",
    "Encoder",
    "HfTlaserEncoder",
    "SentenceTransformerEncoder",
    "VectorsEncoder",
    "cache_root",
    "card_languages",
    "folder_fingerprint",
    "load",
    "text_keys",
    "texts_digest",
    "vector_width",
    "write_vectors",
]
