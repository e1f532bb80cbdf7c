"""``hf-tlaser embed``: the vectors of every line of a text file, streamed into an embeddings file (format in
:mod:`hf_tlaser.inference.store`) in bounded memory, resumable, split across machines and processes.

* The model is any SPEC ``hf-tlaser evaluate --reference`` takes (:func:`hf_tlaser.encoders.load`): an
  hf_tlaser model folder, or a sentence-transformers folder or Hub id with its prompt.
* The input is plain or ``.gz`` UTF-8 text, one sentence per line (``--documents whole|sentences``: one document per
  line, embedded whole, cut to its first 750 words as T-LASER does, or as the mean of its sentences' vectors, as
  LASER does). An empty line is embedded as the empty text and counted. A line over the model's token length is
  truncated and counted (sidecar ``truncated``, and a warning), never dropped. A line over
  :data:`~hf_tlaser.inference.lines.MAX_LINE_CHARS` characters is cut to them before it is tokenised (sidecar
  ``cut``, and a warning), so one huge line cannot take unbounded memory (:mod:`hf_tlaser.inference.lines`).
* Before the model loads: the output's folder is tried for writing and ``OUTPUT.lock`` is locked (one run per
  output, :mod:`hf_tlaser.guards`). A first pass counts the lines and checks that they are UTF-8, and the
  input's SHA-256 is noted (``--resume`` refuses an input edited since), and the free space is checked for the
  vector width the model's files state (:func:`~hf_tlaser.encoders.vector_width`). Before the first line is
  embedded, the free space is checked again for the loaded model's width and the output's blocks are allocated; a
  write error is one line naming the file.
* Then the lines are read in chunks of ``--chunk-size``; each chunk is tokenized once (the model's prompt and
  special tokens included, cut to its token length: :meth:`~hf_tlaser.encoders.Encoder.tokenize`), sorted by
  length and cut into batches of at most ``--max-tokens`` padded tokens and ``--batch-size`` rows, and those ids go
  to the model a padded batch at a time (:meth:`~hf_tlaser.encoders.Encoder.embed_ids`); its vectors are written in
  input order into ``PATH.partial`` and the chunk is logged as done. ``--resume`` continues a killed run at its
  first chunk not done; at the end the sidecar is written and the file renamed to ``PATH``.
* ``--shard I/N`` (0-based I) embeds the I-th of N contiguous runs of whole chunks, so that a scheduler's job array
  splits the work (docs/embed_and_mine.md); ``read_embeddings`` joins the shard files.
* Under ``accelerate launch`` (several GPUs, or CPU processes) the processes take the chunks in turn and write
  their rows into one file; the first process finishes it.

Chunks are cut at the same lines whatever the shard or process, so a sharded, multi-process or resumed run gives the
rows that one run gives.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from hf_tlaser.backend.runtime import BACKENDS
from hf_tlaser.bitext.texts import Texts
from hf_tlaser.commands import print_summary, run_command
from hf_tlaser.data.batching import pack_chunk
from hf_tlaser.encoders import VECTORS_PREFIX, Encoder, load, vector_width
from hf_tlaser.encoding import DOCUMENT_MODES, DOCUMENT_WORDS, embed_documents
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import OutputLock, check_writable, lock_path, refuse_outputs_over_inputs, write_failed
from hf_tlaser.hardware import PRECISIONS, resolve_precision
from hf_tlaser.model_folders import AUTO, EVAL_PROMPTS
from hf_tlaser.version import __version__

from .lines import Source, plan_lines, read_chunks, scan_input
from .store import DTYPES, EmbeddingsWriter, first_non_finite, partial_paths, sidecar_path

logger = logging.getLogger(__name__)

MODEL_HELP = "an hf_tlaser model folder (hf-tlaser train --output-dir), or a sentence-transformers folder or Hub id"


# ---------------------------------------------------------------------------------------------------- the plan


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"I/N"`` -> ``(I, N)`` with 0 <= I < N (None: no sharding); ``UsageError`` otherwise."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise UsageError(f"--shard {text}: expected I/N, e.g. 0/8 (0-based I, as SLURM_ARRAY_TASK_ID of --array=0-7)")
    index, count = int(match[1]), int(match[2])
    if count < 1:
        raise UsageError(f"--shard {text}: N must be at least 1 (I/N: shard I of N, e.g. 0/8)")
    if index >= count:
        raise UsageError(
            f"--shard {text}: I must be 0 to {count - 1} (0-based, as SLURM_ARRAY_TASK_ID of --array=0-{count - 1})"
        )
    return index, count


# ---------------------------------------------------------------------------------------------------- the model


def vectors_fingerprint(encoder: Encoder) -> str:
    """Hash of the model's files (the encoder's fingerprint) and the prompt: what determines the vectors."""
    return hashlib.sha256(f"{encoder.fingerprint}\0{encoder.prompt or ''}".encode()).hexdigest()


def encode_batched(
    encoder: Encoder, texts: list[str], max_tokens: int, batch_size: int, progress=None
) -> tuple[torch.Tensor, np.ndarray]:
    """float32 vectors of ``texts`` in input order and which texts were truncated (over the encoder's
    ``max_length``): every text tokenized once, the ids packed by length into batches of at most ``max_tokens``
    padded tokens and ``batch_size`` rows, each batch run through the model."""
    rows, truncated = encoder.tokenize(texts)
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    ones = np.ones(len(rows), dtype=np.int64)
    out = np.empty((len(rows), encoder.dim), dtype=np.float32)
    for batch in pack_chunk(np.arange(len(rows)), lengths, lengths, ones, ones, max_tokens, batch_size):
        out[batch] = encoder.embed_ids([rows[i] for i in batch])
        if progress is not None:
            progress.update(len(batch))
    return torch.from_numpy(out), np.asarray(truncated, dtype=bool)


def embed_lines(
    encoder: Encoder, lines: list[str], documents: str | None, max_tokens: int, batch_size: int, progress=None
) -> tuple[np.ndarray, int]:
    """float32 [len(lines), dim] in input order and the number of lines truncated (documents: by
    ``hf_tlaser.encoding.embed_documents``, the policy ``hf_tlaser.encode`` follows); ``progress`` (tqdm) counts
    lines."""
    if documents is None:
        vectors, over = encode_batched(encoder, lines, max_tokens, batch_size, progress)
        return vectors.numpy(), int(over.sum())
    vectors, truncated = embed_documents(
        lambda texts: encode_batched(encoder, texts, max_tokens, batch_size), lines, documents, DOCUMENT_WORDS
    )
    if progress is not None:
        progress.update(len(lines))
    return vectors.numpy(), int(truncated.sum())


def load_model(args: Job, device) -> Encoder:
    """``--model`` as an encoder that tokenises its texts (``UsageError`` for a ``vectors:`` file)."""
    encoder = load(
        args.model,
        prompt_name=args.prompt,
        prefer=EVAL_PROMPTS,
        device=device,
        precision=args.precision,
        argument="--model",
        backend=args.backend,
    )
    if encoder.tokenizer is None:
        raise UsageError(f"--model {encoder.spec}: {encoder.kind} is not a model; give {MODEL_HELP}")
    return encoder


# ---------------------------------------------------------------------------------------------------- the command


@dataclass(frozen=True)
class Job:
    """What one ``hf-tlaser embed`` run does: its options (see :func:`build_parser`, whose defaults are these), and
    ``texts``, the input's lines and digest when the caller has read them (``hf-tlaser mine --model``), so that the
    file is not read again."""

    model: str
    input: str
    output: str
    prompt: str = AUTO
    documents: str | None = None
    dtype: str = "float32"
    normalize: bool = False
    precision: str = "auto"
    backend: str = "auto"
    batch_size: int = 128
    max_tokens: int = 8192
    chunk_size: int = 10_000
    shard: str | None = None
    resume: bool = False
    texts: Texts | None = None


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-tlaser embed`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="hf-tlaser embed",
        description="Embed every line of a text file into PATH.npy (float16/32 [lines, dim], np.load(PATH, "
        "mmap_mode='r')) and its sidecar PATH.npy.json; streams in bounded memory, resumes, shards across jobs, and "
        "runs several processes under accelerate launch. See docs/embed_and_mine.md.",
    )
    parser.add_argument("--model", required=True, metavar="SPEC", help=f"the model: {MODEL_HELP}")
    parser.add_argument(
        "--input", required=True, metavar="FILE", help="UTF-8 text, plain or .gz, one sentence (or document) a line"
    )
    parser.add_argument("--output", required=True, metavar="PATH.npy", help="the embeddings file to write")
    parser.add_argument(
        "--prompt",
        default=Job.prompt,
        metavar="NAME",
        help="sentence-transformers prompt: auto (the model's 'query' prompt when it has one, e5's for symmetric "
        "tasks such as bitext mining, else its default prompt), none, or a prompt name (default: %(default)s)",
    )
    parser.add_argument(
        "--documents",
        choices=DOCUMENT_MODES,
        help=f"each line is a document: whole (one sequence, its first {DOCUMENT_WORDS} words, as T-LASER) or "
        "sentences (the mean of its sentences' vectors, as LASER)",
    )
    parser.add_argument("--dtype", choices=DTYPES, default=Job.dtype, help="stored dtype (default: %(default)s)")
    parser.add_argument("--normalize", action="store_true", help="scale every vector to unit length")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=Job.precision,
        help="forward precision; auto: bf16 where the device runs it natively, else fp32 (default: %(default)s)",
    )
    parser.add_argument(
        "--backend",
        choices=("auto", *BACKENDS),
        default=Job.backend,
        help="what runs an hf_tlaser model: torch, or the files hf-tlaser export wrote into its folder; auto (with "
        "--precision auto): the fastest backend measured on this CPU class without quality loss (the folder's "
        "backends.json), else torch (default: %(default)s)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=Job.batch_size, help="rows per batch at most (default: %(default)s)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=Job.max_tokens, help="padded tokens per batch at most (default: %(default)s)"
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=Job.chunk_size,
        help="lines read, length-sorted and written at a time: bounds memory, and what a killed run loses at most "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="embed the I-th (0-based) of N contiguous slices of whole chunks, e.g. $SLURM_ARRAY_TASK_ID/8",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue an interrupted run of the same arguments at its last chunk"
    )
    return parser


def check_args(args: Job) -> tuple[Path, Path, tuple[int, int] | None]:
    """The checks that need neither the model nor more than a glance at the files (the files the run writes, its
    output's sidecar, unfinished files and lock included, are none of those it reads); input, output and shard."""
    for flag in ("batch_size", "max_tokens", "chunk_size"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be at least 1")
    shard = parse_shard(args.shard)
    if args.model.startswith(VECTORS_PREFIX):
        raise UsageError(f"--model {args.model}: a vectors: file is not a model; give {MODEL_HELP}")
    source = Path(args.input).expanduser()
    if not source.is_file():
        problem = "is a folder" if source.is_dir() else "no such file"
        raise UsageError(f"--input {args.input}: {problem}; give a text file, one sentence a line (plain or .gz)")
    if source.stat().st_size == 0:
        raise UsageError(f"--input {args.input}: empty file; nothing to embed")
    output = Path(args.output).expanduser()
    if output.suffix != ".npy":
        raise UsageError(f"--output {args.output}: give a path ending in .npy")
    check_writable(output, "--output")
    written = [output, sidecar_path(output), *partial_paths(output), lock_path(output)]
    model = Path(args.model).expanduser()
    refuse_outputs_over_inputs({"--output": written}, {"--input": source, "--model": model if model.exists() else None})
    return source, output, shard


def distributed_state():
    """``accelerate``'s process state: one process, or those of ``accelerate launch`` (CPU processes over gloo
    where there is no GPU)."""
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def run(args: Job) -> dict | None:
    """Embed ``args.input`` into ``args.output``; the run's summary on the first process (None on the others)."""
    source, output, shard = check_args(args)
    state = distributed_state()
    lock = OutputLock(output, "--output").acquire() if state.is_main_process else None
    try:
        return embed_locked(args, source, output, shard, state)
    except OSError as err:  # a full disk, a quota, a folder made read-only meanwhile
        raise write_failed(err, output, "--output") from None
    finally:
        if lock is not None:
            lock.release()


def embed_locked(args: Job, path: Path, output: Path, shard: tuple[int, int] | None, state) -> dict | None:
    """:func:`run` once the output is locked (by the first process)."""
    finished = EmbeddingsWriter.check_output(output, args.resume)
    if finished:
        return {"output": str(output), "status": "already finished (--resume has nothing to do)"}
    if args.texts is None:
        source = scan_input(path)
    else:
        source = Source(path, len(args.texts.lines), args.texts.sha256, args.texts.lines)
    lines = source.lines
    plan = plan_lines(lines, args.chunk_size, shard)
    width = vector_width(args.model)
    if width is not None:  # before the model loads; prepare checks again with the loaded model's width
        EmbeddingsWriter.check_room(output, plan.stop - plan.start, width, args.dtype)
    device = state.device
    precision = resolve_precision(args.precision, device).precision
    encoder = load_model(args, device)
    settings = dict(
        model=args.model,
        fingerprint=vectors_fingerprint(encoder),
        dim=encoder.dim,
        dtype=args.dtype,
        normalized=args.normalize,
        input=str(args.input),
        input_size=path.stat().st_size,
        input_sha256=source.sha256,
        input_lines=lines,
        start=plan.start,
        stop=plan.stop,
        shard=list(shard) if shard else None,
        chunk_size=args.chunk_size,
        prompt=encoder.prompt,
        precision=precision,
        backend=encoder.backend,
        documents=args.documents,
    )
    state.wait_for_everyone()  # every process has checked the output before the first creates PATH.partial
    if state.is_main_process:
        EmbeddingsWriter.prepare(output, plan.stop - plan.start, encoder.dim, args.dtype, settings, args.resume)
    state.wait_for_everyone()
    writer = EmbeddingsWriter(output, rank=state.process_index)
    done = writer.finished()
    remaining = [c for c in range(plan.chunks) if c not in done]
    own = {c for c in remaining if c % state.num_processes == state.process_index}
    todo = sum(plan.bounds(c)[1] - plan.bounds(c)[0] for c in own)
    where = f"lines {plan.start}-{plan.stop - 1} of {lines}" + (f", shard {shard[0]}/{shard[1]}" if shard else "")
    logger.info("embedding %s with %s (%s, %s) into %s", where, encoder.describe(), precision, args.dtype, output)
    if done:
        logger.info("resumed: %d of %d chunks were done", len(done), plan.chunks)
    if not plan.chunks:
        logger.warning("%s: more shards than chunks of --chunk-size lines; this shard is empty", args.shard)
    rank = f" [process {state.process_index}/{state.num_processes}]" if state.num_processes > 1 else ""
    progress = tqdm(total=todo, unit="line", desc=f"embed{rank}", disable=not state.is_local_main_process)
    started = time.perf_counter()
    try:  # the bar ends before any error line
        for chunk, texts, cut in read_chunks(source, plan):
            if chunk not in own:
                continue
            vectors, truncated = embed_lines(encoder, texts, args.documents, args.max_tokens, args.batch_size, progress)
            if args.normalize:
                vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            empty = sum(1 for text in texts if not text.strip())
            offset = plan.bounds(chunk)[0] - plan.start
            stored = vectors.astype(args.dtype)
            bad = first_non_finite(stored)
            if bad is not None:  # a broken weight (NaN) or an overflow: never written as if it were a vector
                raise UsageError(
                    f"--model {args.model}: the vector of line {plan.bounds(chunk)[0] + bad + 1} of {path} is not "
                    f"finite (NaN or Inf as {args.dtype}); check the model's weights and --precision; its chunk was "
                    "not written (--resume continues there)"
                )
            writer.write_chunk(chunk, offset, stored, truncated=truncated, empty=empty, cut=cut)
    finally:
        progress.close()
    state.wait_for_everyone()
    seconds = time.perf_counter() - started
    if not state.is_main_process:
        return None
    meta = dict(
        settings,
        model_identity=encoder.identity,
        prompt_name=encoder.prompt_name,
        count=plan.stop - plan.start,
        lines=plan.stop - plan.start,
        hf_tlaser_version=__version__,
    )
    meta = writer.finish(plan.chunks, meta)
    embedded = sum(plan.bounds(c)[1] - plan.bounds(c)[0] for c in remaining)  # by every process, this run
    if meta["truncated"]:
        logger.warning(
            "%d lines were longer than the model's %d tokens and were truncated", meta["truncated"], encoder.max_length
        )
    return {
        "output": str(output),
        "rows": meta["count"],
        "dim": encoder.dim,
        "truncated": meta["truncated"],
        "empty": meta["empty"],
        "cut": meta["cut"],
        "processes": state.num_processes,
        "seconds": round(seconds, 2),
        "lines_per_second": round(embedded / max(seconds, 1e-9), 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser embed``: 0 on success, 2 with one line on stderr for a usage mistake."""
    args = Job(**vars(build_parser().parse_args(argv)))
    try:
        return run_command("hf-tlaser embed", lambda: print_summary(run(args)))
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()  # a clean exit under accelerate launch / torchrun


if __name__ == "__main__":
    sys.exit(main())
