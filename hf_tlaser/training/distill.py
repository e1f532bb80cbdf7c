"""LASER3 / Reimers & Gurevych (2020) distillation for the joint-BPE families (``hf-tlaser train --teacher SPEC``).

Every sentence of a batch (both sides of each pair, every sentence of a multi-way group) is pulled by MSE towards
the teacher's vector of its pair's pivot text (the pivot side of a pair; the target side when neither side is a
pivot; in a multi-way group, the group's first pivot, else its first target language). The teacher's vectors are
computed once before training (``TeacherCache``) for the pivot-side texts of the corpus and gathered by text in the
collator (``DistillCollator``); the loss term itself is added in one place, ``LaserTrainer.compute_loss``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
import torch
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from hf_tlaser.data import Pair, ParallelExamples
from hf_tlaser.errors import UsageError
from hf_tlaser.teachers import NO_CACHE, Teacher, TeacherCache, VectorsTeacher, load_teacher
from hf_tlaser.training.plan import DataPlan
from hf_tlaser.training.presets import TEACHER_HEAD_MEMBERS
from hf_tlaser.training.resolve import Built, Plugin, Resolved
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import DISTILL_INPUTS

logger = logging.getLogger("hf_tlaser.train")


def check_teacher(spec: RunSpec) -> Teacher | None:
    """The run's teacher (None without ``--teacher``); UsageError on a bad ``--distill-weight`` or an unloadable
    teacher. Cheap: no corpus is read."""
    if spec.teacher is None:
        return None
    if spec.distill_weight <= 0:
        raise UsageError(f"--distill-weight {spec.distill_weight}: must be > 0")
    if spec.streaming:
        raise UsageError("--teacher is not available with --streaming: teacher vectors are computed before training")
    return load_teacher(spec.teacher)


def student_width(config: PretrainedConfig) -> int:
    """Width of the student's sentence vector: its projection head's (``teacher_dim``), else ``hidden_size``."""
    return int(getattr(config, "teacher_dim", None) or config.hidden_size)


def check_widths(teacher: Teacher, config: PretrainedConfig, spec: RunSpec) -> None:
    """UsageError when the teacher's and the student's sentence vectors differ in width."""
    width = student_width(config)
    if teacher.dim != width:
        head = "" if spec.model in TEACHER_HEAD_MEMBERS else " (no projection head for this family)"
        raise UsageError(
            f"--teacher {spec.teacher}: its vectors have {teacher.dim} dimensions, the student's {width}{head}; add a "
            f"projection head with --set teacher_dim={teacher.dim} ({', '.join(TEACHER_HEAD_MEMBERS)}) or train a "
            "student of the teacher's width"
        )


def warn_languages(teacher: Teacher, languages: Sequence[str]) -> None:
    """Warn once when the teacher's known languages lack some training languages (unknown: no warning)."""
    if teacher.languages is None:
        return
    known = {lang.split("_")[0].split("-")[0] for lang in teacher.languages}
    missing = sorted(lang for lang in languages if lang.split("_")[0] not in known)
    if missing:
        logger.warning("--teacher %s: its model card does not list the training languages %s", teacher.spec, missing)


def pivot_of_pair(src: str, tgt: str, pivots: Sequence[str]) -> str:
    """The language whose text the teacher embeds for the pair src->tgt: the pivot side, the target when both or
    neither side is a pivot."""
    return src if src in pivots and tgt not in pivots else tgt


def pivot_of_group(group: dict[str, str | None], pairs: Sequence[Pair], pivots: Sequence[str]) -> str | None:
    """A multi-way group's pivot language: its first pivot of the curriculum present, else its first target language
    present."""
    curriculum = {lang for pair in pairs for lang in pair}
    for lang in [lang for lang in pivots if lang in curriculum] + [b for _, b in pairs]:
        if group.get(lang):
            return lang
    return None


def pivot_languages(pairs: Sequence[Pair], pivots: Sequence[str]) -> list[str]:
    """Every language whose texts may be a pivot text (the teacher's inputs)."""
    return sorted({pivot_of_pair(a, b, pivots) for a, b in pairs} | ({lang for p in pairs for lang in p} & set(pivots)))


def teacher_matrix(
    teacher: Teacher, cache_dir: str | None, dataset: ParallelExamples, languages: Sequence[str]
) -> tuple[np.ndarray, dict[str, int]]:
    """The teacher's vectors [N, dim] of the distinct texts of ``languages``' columns of ``dataset``, and each
    text's row."""
    columns = [lang for lang in languages if lang in dataset.languages]
    texts = sorted({text for lang in columns for text in dataset.dataset[lang] if text})
    if cache_dir == NO_CACHE or isinstance(teacher, VectorsTeacher):  # a vectors: file is a lookup already
        matrix = np.asarray(teacher.encode(texts), dtype=np.float32)
    else:
        logger.info(
            "teacher %s: the vectors of %d pivot texts (cached ones are read, not computed)", teacher.spec, len(texts)
        )
        main = int(os.environ.get("LOCAL_RANK", "0")) == 0  # one progress bar per machine
        matrix = TeacherCache(cache_dir, teacher, show_progress=main).get(texts)
    logger.info("teacher %s: %d pivot texts, %d dimensions", teacher.spec, len(texts), matrix.shape[1])
    return matrix, {text: row for row, text in enumerate(texts)}


class DistillCollator:
    """Wraps a family's collator: adds every sentence of the micro-batch in encoder format (``distill_input_ids``,
    ``distill_attention_mask`` [M, S]) and the teacher vector of each one's pivot text (``distill_targets`` [M, D])."""

    def __init__(
        self,
        collator,
        tokenizer: PreTrainedTokenizerBase,
        matrix: np.ndarray,
        row_of: dict[str, int],
        pairs: Sequence[Pair],
        pivots: Sequence[str],
    ) -> None:
        self.collator, self.tokenizer = collator, tokenizer
        self.matrix, self.row_of = torch.from_numpy(np.asarray(matrix, dtype=np.float32)), row_of
        self.pairs, self.pivots = list(pairs), list(pivots)
        self.sentence_languages = sorted({lang for pair in self.pairs for lang in pair})

    def sentences(self, examples: list[dict[str, str | None]]) -> tuple[list[str], list[str]]:
        """(student texts, their pivot texts) of a micro-batch."""
        texts, pivot_texts = [], []
        for ex in examples:
            if "src" in ex:
                src_is_pivot = pivot_of_pair(ex["src_lang"], ex["tgt_lang"], self.pivots) == ex["src_lang"]
                pivot = ex["src"] if src_is_pivot else ex["tgt"]
                texts += [ex["src"], ex["tgt"]]
                pivot_texts += [pivot, pivot]
            else:
                lang = pivot_of_group(ex, self.pairs, self.pivots)
                group = [ex[other] for other in self.sentence_languages if ex.get(other)] if lang else []
                texts += group
                pivot_texts += [ex[lang]] * len(group)
        return texts, pivot_texts

    def __call__(self, examples: list[dict[str, str | None]]) -> dict[str, torch.Tensor]:
        batch = self.collator(examples)
        texts, pivot_texts = self.sentences(examples)
        enc = self.tokenizer(texts, padding=True, padding_side="right", return_tensors="pt")
        rows = torch.tensor([self.row_of[text] for text in pivot_texts], dtype=torch.long)
        ids, mask, targets = DISTILL_INPUTS
        batch.update({ids: enc["input_ids"], mask: enc["attention_mask"], targets: self.matrix[rows]})
        return batch


class Distillation(Plugin):
    """``--teacher``: the teacher loaded before any data is read, its width and languages checked against the
    student's config and the curriculum, the family's collator wrapped in ``DistillCollator`` and the term's
    weight given to the trainer."""

    def __init__(self, teacher: Teacher, spec: RunSpec) -> None:
        self.teacher, self.spec = teacher, spec

    @classmethod
    def check(cls, resolved: Resolved) -> Distillation | None:
        teacher = check_teacher(resolved.spec)
        return None if teacher is None else cls(teacher, resolved.spec)

    def check_config(self, config: PretrainedConfig, plan: DataPlan) -> None:
        check_widths(self.teacher, config, self.spec)
        warn_languages(self.teacher, plan.languages)

    def attach(self, built: Built) -> DistillCollator:
        plan = built.plan
        languages = pivot_languages(plan.pairs, plan.pivots)
        matrix, row_of = teacher_matrix(self.teacher, self.spec.teacher_cache, built.dataset, languages)
        return DistillCollator(built.collator, built.tokenizer, matrix, row_of, plan.pairs, plan.pivots)

    def fit_options(self) -> dict:
        return {"distill_weight": self.spec.distill_weight}
