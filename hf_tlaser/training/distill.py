"""LASER3 / Reimers & Gurevych (2020) distillation for the joint-BPE families (``hf-tlaser train --teacher SPEC``).

Every sentence of a batch (both sides of each pair, every sentence of a multi-way group) is pulled by MSE towards
the teacher's vector of its pair's pivot text (the pivot side of a pair; the target side when neither side is a
pivot; in a multi-way group, the group's first pivot, else its first target language). The teacher's vectors are
computed once before training (``TeacherCache``) for the pivot texts of the micro-batches the run will read (its
``--max-steps`` updates, from the sampler's fixed plan; every pivot-side text of the corpus when the run covers an
epoch or more) and gathered by text in the collator (``DistillCollator``), which computes any other text it meets
(counted in the log); the loss term itself is added in one place, ``LaserTrainer.compute_loss``.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Sampler
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from hf_tlaser.data import Pair, ParallelExamples
from hf_tlaser.encoders import VectorsEncoder
from hf_tlaser.errors import UsageError
from hf_tlaser.teachers.cache import NO_CACHE, TeacherCache
from hf_tlaser.teachers.targets import Teacher, load_teacher
from hf_tlaser.training.presets import TEACHER_HEAD_MEMBERS
from hf_tlaser.training.resolve import Built, DataPlan, Plugin, RunPlan
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import DISTILL_INPUTS

logger = logging.getLogger("hf_tlaser.train")


def check_teacher(spec: RunSpec) -> Teacher | None:
    """The run's teacher (None without ``--teacher``), in the run's ``--precision``; UsageError on a bad
    ``--distill-weight`` or an unloadable teacher. Cheap: no corpus is read."""
    if spec.teacher is None:
        return None
    if spec.distill_weight <= 0:
        raise UsageError(f"--distill-weight {spec.distill_weight}: must be > 0")
    if spec.streaming:
        raise UsageError("--teacher is not available with --streaming: teacher vectors are computed before training")
    return load_teacher(spec.teacher, precision=spec.precision)


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


def corpus_pivot_texts(dataset: ParallelExamples, languages: Sequence[str]) -> list[str]:
    """The distinct texts of ``languages``' columns of ``dataset``: every text that may be a pivot text."""
    columns = [lang for lang in languages if lang in dataset.languages]
    return sorted({text for lang in columns for text in dataset.dataset[lang] if text})


def teacher_matrix(teacher: Teacher, cache_dir: str | None, texts: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    """The teacher's vectors [N, dim] of the distinct ``texts``, and each text's row."""
    if cache_dir == NO_CACHE or isinstance(teacher, VectorsEncoder):  # a vectors: file is a lookup already
        matrix = np.asarray(teacher.encode(texts), dtype=np.float32)
    else:
        logger.info(
            "teacher %s: the vectors of %d pivot texts (cached ones are read, not computed)", teacher.spec, len(texts)
        )
        main = int(os.environ.get("LOCAL_RANK", "0")) == 0  # one progress bar per machine
        matrix = TeacherCache(cache_dir, teacher, show_progress=main).get(texts)
    logger.info("teacher %s: %d pivot texts, %d dimensions", teacher.spec, len(texts), matrix.shape[1])
    return matrix, {text: row for row, text in enumerate(texts)}


def pivot_sentences(
    examples: list[dict[str, str | None]], pairs: Sequence[Pair], pivots: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(student texts, their pivot texts) of a micro-batch: both sides of a pair, every sentence of a multi-way
    group."""
    languages = sorted({lang for pair in pairs for lang in pair})
    texts, pivot_texts = [], []
    for ex in examples:
        if "src" in ex:
            src_is_pivot = pivot_of_pair(ex["src_lang"], ex["tgt_lang"], pivots) == ex["src_lang"]
            pivot = ex["src"] if src_is_pivot else ex["tgt"]
            texts += [ex["src"], ex["tgt"]]
            pivot_texts += [pivot, pivot]
        else:
            lang = pivot_of_group(ex, pairs, pivots)
            group = [ex[other] for other in languages if ex.get(other)] if lang else []
            texts += group
            pivot_texts += [ex[lang]] * len(group)
    return texts, pivot_texts


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
        teacher: Teacher | None = None,
    ) -> None:
        """``matrix`` [N, D] holds the teacher vectors computed before training, ``row_of`` each text's row; a pivot
        text without a row is encoded by ``teacher`` when a micro-batch first needs it (``late`` counts them;
        without a teacher it is a ``KeyError``)."""
        self.collator, self.tokenizer, self.teacher = collator, tokenizer, teacher
        self.matrix, self.row_of = torch.from_numpy(np.asarray(matrix, dtype=np.float32)), dict(row_of)
        self.pairs, self.pivots = list(pairs), list(pivots)
        self.late = 0

    def sentences(self, examples: list[dict[str, str | None]]) -> tuple[list[str], list[str]]:
        """(student texts, their pivot texts) of a micro-batch."""
        return pivot_sentences(examples, self.pairs, self.pivots)

    def add_missing(self, texts: Sequence[str]) -> None:
        """Encode the ``texts`` that have no row yet with the teacher and append their rows."""
        missing = [text for text in dict.fromkeys(texts) if text not in self.row_of]
        if not missing:
            return
        if self.teacher is None:
            raise KeyError(f"no teacher vector for the pivot text {missing[0]!r}")
        if not self.late:
            logger.warning("teacher %s: pivot texts outside the planned micro-batches, computed now", self.teacher.spec)
        vectors = torch.from_numpy(np.asarray(self.teacher.encode(missing), dtype=np.float32))
        self.row_of.update((text, len(self.matrix) + i) for i, text in enumerate(missing))
        self.matrix = torch.cat([self.matrix, vectors])
        self.late += len(missing)
        logger.debug("teacher %s: %d pivot texts computed during training so far", self.teacher.spec, self.late)

    def __call__(self, examples: list[dict[str, str | None]]) -> dict[str, torch.Tensor]:
        batch = self.collator(examples)
        texts, pivot_texts = self.sentences(examples)
        enc = self.tokenizer(texts, padding=True, padding_side="right", return_tensors="pt")
        self.add_missing(pivot_texts)
        rows = torch.tensor([self.row_of[text] for text in pivot_texts], dtype=torch.long)
        ids, mask, targets = DISTILL_INPUTS
        batch.update({ids: enc["input_ids"], mask: enc["attention_mask"], targets: self.matrix[rows]})
        return batch


def planned_pivot_texts(
    dataset: ParallelExamples,
    sampler: Sampler | None,
    micro_batches: int | None,
    pairs: Sequence[Pair],
    pivots: Sequence[str],
) -> list[str] | None:
    """The distinct pivot texts of the first ``micro_batches`` micro-batches of epoch 0 of this rank's ``sampler``
    (its plan is fixed by the seed, so these are the ones the run reads; a resumed run reads a suffix of them). None
    when the run reads an epoch or more, streams, or has no update count: every pivot text may be read."""
    if sampler is None or micro_batches is None or micro_batches >= len(sampler):
        return None
    sampler.set_epoch(0)
    texts: set[str] = set()
    for items in itertools.islice(iter(sampler), micro_batches):
        texts.update(pivot_sentences(dataset.__getitems__(items), pairs, pivots)[1])
    return sorted(texts)


class Distillation(Plugin):
    """``--teacher``: the teacher loaded before any data is read, its width and languages checked against the
    student's config and the curriculum, the family's collator wrapped in ``DistillCollator`` and the term's
    weight given to the trainer."""

    def __init__(self, teacher: Teacher, spec: RunSpec) -> None:
        self.teacher, self.spec = teacher, spec
        self.fit_options = {"distill_weight": spec.distill_weight}

    @classmethod
    def check(cls, plan: RunPlan) -> Distillation:
        return cls(check_teacher(plan.spec), plan.spec)

    def check_config(self, config: PretrainedConfig, data: DataPlan) -> None:
        check_widths(self.teacher, config, self.spec)
        warn_languages(self.teacher, data.languages)

    def attach(self, built: Built) -> DistillCollator:
        data = built.data
        texts = planned_pivot_texts(built.dataset, built.sampler, built.micro_batches, data.pairs, data.pivots)
        if texts is None:
            texts = corpus_pivot_texts(built.dataset, pivot_languages(data.pairs, data.pivots))
        else:
            logger.info(
                "teacher %s: the run's %d micro-batches read %d pivot texts",
                self.spec.teacher,
                built.micro_batches,
                len(texts),
            )
        matrix, row_of = teacher_matrix(self.teacher, self.spec.teacher_cache, texts)
        return DistillCollator(built.collator, built.tokenizer, matrix, row_of, data.pairs, data.pivots, self.teacher)
