"""``hf-tlaser train --model cnv``: Li & Mak's cNV in two stages, one command.

Stage 1 trains the bilingual NMT pair a->b and b->a of ``--pairs a-b`` (``hf_tlaser.training.nmt_pair``) into
``OUT/nmt-a-b`` and ``OUT/nmt-b-a``, ``--nmt-steps`` updates each; ``--nmt-pair A_TO_B,B_TO_A`` takes two existing
Hugging Face seq2seq folders or Hub ids instead (no stage 1). Stage 2 builds ``CNVModel.from_nmt_pair`` (NMT weights
copied and frozen) and trains the shared layers with ``LaserTrainer`` for ``--max-steps`` updates on the same
corpora, then saves the model (with ``tokenizer_<lang>/``) into OUT. NV is ``--set distance_beta=0``; ``--set
nmt.KEY=VALUE`` changes the Marian config of stage 1.

``--resume auto`` continues where the run stopped: a finished NMT direction (``"nmt"`` in ``hf_tlaser_train.json``)
is reused, an unfinished one resumes from its last checkpoint, stage 2 from ``OUT/checkpoint-*``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    MarianConfig,
    PreTrainedTokenizerBase,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from hf_tlaser.data import ParallelExamples, Source, parse_pairs, sentence_lengths
from hf_tlaser.data.collator import CNVCollator
from hf_tlaser.errors import UsageError
from hf_tlaser.models.cnv import CNVConfig, CNVModel
from hf_tlaser.tokenization import save_tokenizer
from hf_tlaser.training.nmt_pair import (
    finished_nmt,
    load_pair_corpora,
    nmt_folder,
    nmt_with_data,
    train_marian_bpe,
    train_nmt,
)
from hf_tlaser.training.presets import NMTPreset
from hf_tlaser.training.resolve import RunPlan
from hf_tlaser.training.resume import check_checkpoint, check_resume, check_resume_config
from hf_tlaser.training.run import (
    RECORD,
    Run,
    check_output_dir,
    read_record,
    recorded_outputs,
    training_arguments,
)
from hf_tlaser.training.spec import RunSpec, config_overrides, flag_error
from hf_tlaser.training.trainer import LaserTrainer

logger = logging.getLogger("hf_tlaser.train")

NMT_SET_PREFIX = "nmt."
"""``--set nmt.d_model=128``: a ``MarianConfig`` field of the stage-1 models."""
PAIR_KEYS = ("languages", "nmt_a_to_b", "nmt_b_to_a")
"""CNVConfig fields that come from ``--pairs`` and the NMT pair, never from ``--set``."""
STAGE1_FLAGS = ("pairs", "nmt_pair", "corpora", "nmt_steps", "vocab_size", "max_lines", "max_sentence_tokens")
"""Flags whose value a resumed run must keep: they decide the NMT pair (stage 1) and the data."""


@dataclass(frozen=True)
class CNVPlan:
    """What only cNV's training reads of the checked command line (``RunPlan.extra``): the pair, its corpora, the
    cNV config values, the NMT pair's preset or existing folders, the ``nmt.`` ``--set`` items, and the record of
    the run continued (``saved``; None: a new run)."""

    pair: tuple[str, str]
    corpora: list[Source]
    cnv_kwargs: dict
    nmt: NMTPreset
    nmt_pair: tuple[str, str] | None = None
    nmt_set: list[str] = field(default_factory=list)
    saved: dict | None = None


def _is_local_path(source: str) -> bool:
    """A path, not a Hub id (``name`` or ``org/name``)."""
    return source.startswith((".", "/", "~")) or source.count("/") > 1 or os.sep != "/" and os.sep in source


def check_nmt_source(source: str, flag: str = "--nmt-pair") -> None:
    """UsageError unless ``source`` is a folder (or Hub id) of a seq2seq model with its tokenizer."""
    path = Path(source).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {source}: a file; give a Hugging Face seq2seq model folder or Hub id")
    if not path.exists() and _is_local_path(source):
        raise UsageError(f"{flag} {source}: no such folder (give a Hugging Face seq2seq model folder or Hub id)")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"{flag} {source}: no config.json there, not a Hugging Face model folder")
        if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
            raise UsageError(f"{flag} {source}: no tokenizer files there; cNV needs each NMT model's own tokenizer")
    try:
        config = AutoConfig.from_pretrained(str(path) if path.is_dir() else source)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"{flag} {source}: no such folder, and no loadable Hub model ({first})") from None
    if type(config) not in AutoModelForSeq2SeqLM._model_mapping:
        raise UsageError(
            f"{flag} {source}: a {config.model_type} model, not a seq2seq translation model (AutoModelForSeq2SeqLM)"
        )


def _split_set(items: list[str]) -> tuple[list[str], list[str]]:
    """``--set`` items -> (the cNV ones, the ``nmt.`` ones without the prefix)."""
    nmt = [item[len(NMT_SET_PREFIX) :] for item in items if item.startswith(NMT_SET_PREFIX)]
    return [item for item in items if not item.startswith(NMT_SET_PREFIX)], nmt


def check_cnv_args(plan: RunPlan) -> CNVPlan:
    """The cheap checks of a cNV command line (before any file is read), after the flags it does not take
    (``RunSpec.check_families``: ``--teacher``, ``--streaming``, ``--tokenizer``, ``--batching multiway``, ...);
    UsageError on a mistake."""
    spec = plan.spec
    if not spec.pairs:
        raise UsageError("--model cnv takes one language pair a-b (its NMT pair a->b and b->a): give --pairs a-b")
    try:
        pairs = parse_pairs(spec.pairs)
    except ValueError as err:
        raise flag_error("--pairs", err) from None
    if len(pairs) != 1:
        raise UsageError(
            f"--model cnv takes one language pair a-b (its NMT pair a->b and b->a), got --pairs {spec.pairs}"
        )
    if spec.nmt_steps is not None and spec.nmt_steps < 1:
        raise UsageError(f"--nmt-steps {spec.nmt_steps}: must be at least 1")
    cnv_set, nmt_set = _split_set(spec.set)
    nmt_pair = None
    if spec.nmt_pair:
        nmt_pair = tuple(part.strip() for part in spec.nmt_pair.split(","))
        if len(nmt_pair) != 2 or not all(nmt_pair):
            raise UsageError(f"--nmt-pair {spec.nmt_pair}: expected A_TO_B,B_TO_A (two model folders or Hub ids)")
        if spec.nmt_steps is not None or nmt_set:
            what = "--nmt-steps" if spec.nmt_steps is not None else "--set nmt.*"
            raise UsageError(f"{what} trains the NMT pair, --nmt-pair uses existing ones: give one of them")
    overrides = config_overrides(cnv_set, CNVConfig)
    fixed = sorted(set(overrides) & set(PAIR_KEYS))
    if fixed:
        raise UsageError(f"--set {', '.join(fixed)}: set by --pairs and the NMT pair, not by --set")
    preset = plan.preset
    cnv_kwargs = {**preset.config_kwargs, **overrides}
    try:
        CNVConfig(languages=list(pairs[0]), **cnv_kwargs)
    except ValueError as err:
        raise UsageError(f"model config ({preset.name} with --set {cnv_set}): {err}") from None
    nmt_overrides = config_overrides(nmt_set, MarianConfig) if nmt_set else {}
    nmt = nmt_with_data(preset.nmt, plan.recipe, spec.nmt_steps, nmt_overrides)
    try:
        MarianConfig(**nmt.config_kwargs)
    except ValueError as err:
        raise UsageError(f"NMT config ({preset.name} with --set {['nmt.' + s for s in nmt_set]}): {err}") from None
    if nmt_pair:
        for source in nmt_pair:
            check_nmt_source(source)
    return CNVPlan(pairs[0], plan.data.sources, cnv_kwargs, nmt, nmt_pair, nmt_set)


def check_cnv_output_dir(spec: RunSpec) -> tuple[Path | None, dict | None]:
    """(the stage-2 checkpoint to resume from, the record of the run continued); ``--resume auto`` in a cNV run
    dir without stage-2 checkpoints continues its stage 1. The rest as ``check_output_dir``."""
    out = spec.out
    saved = read_record(out) if out.is_dir() else None
    if saved is not None and saved.get("args", {}).get("model") != "cnv":
        saved = None
    if spec.resume in ("auto", "force") and not spec.overwrite and saved and get_last_checkpoint(str(out)) is None:
        logger.info("--resume auto: no stage-2 checkpoint in %s; continuing the cNV run from its NMT pair", out)
        checkpoint = None
    else:
        checkpoint = check_output_dir(spec)
    if checkpoint is None and not (spec.resume and saved):
        return None, None
    if checkpoint is not None:
        if checkpoint.resolve().parent != out.resolve():
            raise UsageError(
                f"--resume {checkpoint}: a cNV run resumes from a checkpoint of its own --output-dir ({out}), "
                "whose NMT pair it reuses"
            )
        check_resume(checkpoint, spec)
        if saved is None:
            raise UsageError(f"--resume {checkpoint}: no {RECORD} in {out}, not a cNV run dir")
    saved_args = saved["args"]
    differ = [
        f"--{flag.replace('_', '-')} {saved_args.get(flag)} (now {getattr(spec, flag)})"
        for flag in STAGE1_FLAGS
        if saved_args.get(flag) != getattr(spec, flag)
    ]
    if saved_args.get("preset") != spec.preset:
        differ.append(f"--preset {saved_args.get('preset')} (now {spec.preset})")
    if _split_set(saved_args.get("set", []))[1] != _split_set(spec.set)[1]:
        differ.append(f"--set nmt.* {_split_set(saved_args.get('set', []))[1]} (now {_split_set(spec.set)[1]})")
    if differ:
        raise UsageError(
            f"--resume: {out} was trained with {'; '.join(differ)}; resume with the same values, or start a new "
            "run with --overwrite"
        )
    return checkpoint, saved


def _same_tokenizer(first: PreTrainedTokenizerBase, second: PreTrainedTokenizerBase) -> bool:
    backends = [getattr(tok, "backend_tokenizer", None) for tok in (first, second)]
    return first is second or (None not in backends and backends[0].to_str() == backends[1].to_str())


def check(plan: RunPlan) -> RunPlan:
    """The checks of ``hf-tlaser train --model cnv`` (see the module docstring) before any corpus text is read, and
    the plan they complete (the checkpoint of stage 2, the cNV config values, ``CNVPlan`` as ``extra``);
    UsageError on a mistake the user can fix."""
    spec = plan.spec
    stage = check_cnv_args(plan)
    checkpoint, saved = check_cnv_output_dir(spec)
    if checkpoint is not None:
        step = check_checkpoint(checkpoint)
        logger.info("resuming stage 2 from %s (step %d)", checkpoint, step)
        done = (saved or {}).get("nmt", {})
        names = [nmt_folder(*direction) for direction in (stage.pair, stage.pair[::-1])]
        unfinished = [name for name in names if not done.get(name, {}).get("finished")]
        if unfinished and not stage.nmt_pair:
            raise UsageError(f"--resume {checkpoint}: the NMT models {unfinished} of this run never finished")
    return replace(
        plan,
        checkpoint=checkpoint,
        config=MappingProxyType(stage.cnv_kwargs),
        extra=replace(stage, saved=saved),
    )


def train(plan: RunPlan) -> LaserTrainer:
    """Run the planned ``hf-tlaser train --model cnv`` (``check``'s plan): stage 1 (or the given NMT pair), then the
    shared layers; returns the stage-2 trainer."""
    spec, preset, recipe, checkpoint = plan.spec, plan.preset, plan.recipe, plan.checkpoint
    stage, saved, data_dir, out = plan.extra, plan.extra.saved, spec.data_dir, spec.out
    a, b = stage.pair
    folders = {direction: out / nmt_folder(*direction) for direction in ((a, b), (b, a))}
    done = (saved or {}).get("nmt", {})
    run = Run.open(plan)  # joins the process group
    run.record["nmt_preset"] = {
        "config": stage.nmt.config_kwargs,
        "steps": stage.nmt.steps,
        "recipe": asdict(stage.nmt.recipe),
    }
    run.record["nmt"] = dict(done)
    run.record["outputs"] = recorded_outputs(out)

    dataset = None
    if stage.nmt_pair:
        sources = stage.nmt_pair
        run.record["nmt"] = {nmt_folder(*d): {"source": s, "trained": False} for d, s in zip(folders, sources)}
    else:
        sources = tuple(str(folder) for folder in folders.values())
        dataset = train_stage_1(run, stage, folders, saved)

    set_seed(spec.seed)
    model = CNVModel.from_nmt_pair(*sources, languages=stage.pair, **plan.config)
    if checkpoint is not None:
        check_resume_config(checkpoint, model.config)
    tok_ab, tok_ba = model.get_tokenizer(a), model.get_tokenizer(b)
    if dataset is None:
        dataset = load_pair_corpora(stage.pair, tok_ab, recipe, stage.corpora, data_dir)
    lengths = sentence_lengths(dataset, tok_ab, [a, b])  # a: source of a->b; b: source of b->a
    if not _same_tokenizer(tok_ab, tok_ba):
        lengths[b] = sentence_lengths(dataset.select_columns([b]), tok_ba, [b])[b]
    sampler = run.plan_batches(lengths, [stage.pair], f"--corpora {spec.corpora} --pairs {spec.pairs}")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    logger.info(
        "%s: %.2fM trainable of %.1fM parameters (NMT frozen: %s), d_h %d, r %d, beta %s, %d micro-batches/epoch/"
        "rank, accumulation %d; training %d updates",
        preset.name,
        trainable / 1e6,
        sum(p.numel() for p in model.parameters()) / 1e6,
        model.config.freeze_nmt,
        model.config.shared_hidden_size,
        model.config.num_summary_heads,
        model.config.distance_beta,
        len(sampler),
        run.training_args.gradient_accumulation_steps,
        spec.max_steps,
    )
    run.write_record()
    return run.fit(model, ParallelExamples(dataset, stage.pair), CNVCollator(tok_ab, tok_ba, stage.pair), sampler)


def train_stage_1(run: Run, plan: CNVPlan, folders: dict[tuple[str, str], Path], saved: dict | None):
    """Stage 1: the NMT pair a->b and b->a into ``folders`` (a finished direction is reused, an unfinished one of a
    resumed run continues from its last checkpoint), each direction's result in ``run.record``; returns the cleaned
    corpora (the dataset of stage 2)."""
    spec, recipe = run.spec, run.recipe
    tokenizer_folder = next((f for f in folders.values() if (f / "tokenizer.json").is_file()), None)
    if saved and tokenizer_folder is not None:
        logger.info("NMT tokenizer: %s (saved with the run)", tokenizer_folder)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    else:
        tokenizer = train_marian_bpe(plan.pair, plan.corpora, spec.data_dir, recipe.vocab_size, recipe.max_lines)
    set_seed(spec.seed)
    dataset = load_pair_corpora(plan.pair, tokenizer, recipe, plan.corpora, spec.data_dir)
    if run.main_process:  # the first files of the run: a mistake found above leaves the output dir as it was
        run.record["outputs"] = sorted(set(run.record["outputs"]) | {f.name for f in folders.values()})
        for folder in folders.values():
            if not finished_nmt(folder):
                save_tokenizer(tokenizer, folder)
        run.write_record()
    for direction, folder in folders.items():
        entry = run.record["nmt"].get(folder.name, {})
        if entry.get("finished") and finished_nmt(folder):
            logger.info("stage 1: reusing the finished NMT model %s (%d updates)", folder, entry["updates"])
            continue
        resume = get_last_checkpoint(str(folder)) if saved and folder.is_dir() else None
        if resume is not None:
            check_checkpoint(Path(resume))
            logger.info("stage 1: resuming %s from %s", folder.name, resume)
        nmt_args = training_arguments(spec, run.precision, folder, plan.nmt.recipe, plan.nmt.steps)
        result = train_nmt(dataset, tokenizer, direction, folder, plan.nmt, nmt_args, resume_from=resume)
        run.record["nmt"][folder.name] = {
            "finished": True,
            "updates": result.updates,
            "first_loss_mt_per_token": result.first_loss,
            "last_loss_mt_per_token": result.last_loss,
        }
        run.write_record()
    return dataset
