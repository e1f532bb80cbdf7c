"""Alias of :mod:`hf_tlaser.models.common.sentence_embedding` (the same module object) for ``from .sentence_embedding
import ...`` in this family's model file; a saved folder gets the real source under this name (``SharedCodeMixin``)."""

import sys

from hf_tlaser.models.common import sentence_embedding

sys.modules[__name__] = sentence_embedding
