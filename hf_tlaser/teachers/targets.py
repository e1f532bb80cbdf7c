"""A teacher is an :class:`~hf_tlaser.encoders.Encoder` whose vectors a student learns to reproduce: loaded by
:func:`load_teacher`, which is :func:`hf_tlaser.encoders.load` with a teacher's defaults."""

from __future__ import annotations

from hf_tlaser.encoders import Encoder, load
from hf_tlaser.model_folders import EVAL_PROMPTS

Teacher = Encoder
"""The type of a loaded teacher: an encoder."""
TRAIN_PROMPTS = EVAL_PROMPTS
"""Preferred prompt names for the texts a student is distilled on: the evaluation rows' (e5: ``query: ``), so that
the student learns the space it is judged in (``scripts/teacher_prompt.py``; docs/training.md, "Teacher prompt")."""


def load_teacher(spec: str, *, argument: str = "--teacher", **options) -> Encoder:
    """:func:`hf_tlaser.encoders.load` for a teacher: errors name ``argument`` (``--teacher``), and the training
    prompts (``TRAIN_PROMPTS``) are preferred unless ``prefer`` says otherwise."""
    options.setdefault("prefer", TRAIN_PROMPTS)
    return load(spec, argument=argument, **options)
