"""Teachers for LASER3-style distillation and reference rows: load a teacher SPEC (:func:`load_teacher`, an
:class:`~hf_tlaser.encoders.Encoder` as :func:`hf_tlaser.encoders.load` gives it), cache its vectors once per
(teacher fingerprint, prompt, text) (:class:`TeacherCache`) and precompute them for a corpus (``hf-tlaser
teacher-vectors``, :func:`teacher_texts`, written as a ``vectors:`` file by :func:`write_vectors`).

Typical use by a trainer::

    teacher = load_teacher(args.teacher, prompt_name=args.teacher_prompt)  # UsageError before data is read
    cache = TeacherCache(args.teacher_cache, teacher)  # None: $HF_TLASER_TEACHER_CACHE, else ~/.cache/...
    targets = cache.get(english_texts)  # float32 [N, teacher.dim], in input order

The loading, the fingerprint and the ``vectors:`` format live in :mod:`hf_tlaser.encoders`; the names re-exported
here keep working. ``HfTlaserTeacher``, ``SentenceTransformerTeacher`` and ``VectorsTeacher`` are deprecated aliases
of the encoders (``HfTlaserEncoder``, ...), kept for one release.
"""

import warnings

from hf_tlaser.encoders import (
    SPEC_HELP,
    VECTORS_PREFIX,
    HfTlaserEncoder,
    SentenceTransformerEncoder,
    VectorsEncoder,
    cache_root,
    folder_fingerprint,
    text_keys,
    texts_digest,
    write_vectors,
)
from hf_tlaser.encoders.identity import ENV_VAR
from hf_tlaser.model_folders import AUTO, EVAL_PROMPTS, NO_PROMPT, choose_prompt, model_folder

from .cache import NO_CACHE, CacheStats, TeacherCache
from .cli import teacher_texts
from .targets import TRAIN_PROMPTS, Teacher, load_teacher

_DEPRECATED = {
    "HfTlaserTeacher": HfTlaserEncoder,
    "SentenceTransformerTeacher": SentenceTransformerEncoder,
    "VectorsTeacher": VectorsEncoder,
}


def __getattr__(name: str):
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(
            f"hf_tlaser.teachers.{name} is deprecated; use hf_tlaser.encoders.{new.__name__}",
            DeprecationWarning,
            stacklevel=2,
        )
        return new
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AUTO",
    "ENV_VAR",
    "EVAL_PROMPTS",
    "NO_CACHE",
    "NO_PROMPT",
    "SPEC_HELP",
    "TRAIN_PROMPTS",
    "VECTORS_PREFIX",
    "CacheStats",
    "Teacher",
    "TeacherCache",
    "cache_root",
    "choose_prompt",
    "folder_fingerprint",
    "load_teacher",
    "model_folder",
    "teacher_texts",
    "text_keys",
    "texts_digest",
    "write_vectors",
]
