"""sentence-transformers layout for a saved hf_tlaser model folder.

Every ``save_pretrained`` of an hf_tlaser model writes these files; the writer lives with the shared model code
(:mod:`hf_tlaser.models.common.pooling`, which saved ``trust_remote_code`` folders carry) and this module
is its public home for the Hub tools. sentence-transformers never lets a folder switch on remote code by itself:
load with ``SentenceTransformer(path, trust_remote_code=True)``, which it forwards to ``AutoConfig``, ``AutoModel``
and ``AutoTokenizer``.
"""

from hf_tlaser.models.common.pooling import (
    add_sentence_transformers_files,
    embedding_dim,
    has_sentence_transformers_files,
    pooling_mode,
    read_model_config,
)

__all__ = [
    "add_sentence_transformers_files",
    "embedding_dim",
    "has_sentence_transformers_files",
    "pooling_mode",
    "read_model_config",
]
