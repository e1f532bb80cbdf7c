"""Teachers for LASER3-style distillation and reference rows: load a teacher SPEC (:func:`load_teacher`), cache its
vectors once per (teacher fingerprint, prompt, text) (:class:`TeacherCache`), precompute them for a corpus
(``hf-tlaser teacher-vectors``, :func:`teacher_texts`) and write or read ``vectors:`` files (:func:`write_vectors`).

Typical use by a trainer::

    teacher = load_teacher(args.teacher, prompt_name=args.teacher_prompt)  # UsageError before data is read
    cache = TeacherCache(args.teacher_cache, teacher)  # None: $HF_TLASER_TEACHER_CACHE, else ~/.cache/...
    targets = cache.get(english_texts)  # float32 [N, teacher.dim], in input order
"""

from hf_tlaser.model_folders import AUTO, EVAL_PROMPTS, NO_PROMPT, choose_prompt, model_folder

from .cache import ENV_VAR, NO_CACHE, CacheStats, TeacherCache, cache_root
from .cli import teacher_texts
from .loading import (
    SPEC_HELP,
    TRAIN_PROMPTS,
    VECTORS_PREFIX,
    HfTlaserTeacher,
    SentenceTransformerTeacher,
    Teacher,
    VectorsTeacher,
    folder_fingerprint,
    load_teacher,
)
from .vectors import text_keys, texts_digest, write_vectors

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
    "HfTlaserTeacher",
    "SentenceTransformerTeacher",
    "Teacher",
    "TeacherCache",
    "VectorsTeacher",
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
