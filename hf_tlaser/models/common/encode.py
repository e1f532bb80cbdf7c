"""``encode`` of every hf_tlaser model (token-budget batches, longest first), the warning for a prompt passed twice,
and the batch of both sides of translation pairs that one encoder call reads; beneath it, what every batcher of
token ids shares (``hf-tlaser embed``'s too): one tokenizer call that reports what it cut (``tokenize``), the padded
batch (``pad_ids``) and the inference mode a forward runs in (``inference``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from transformers.utils import logging

from .pooling import head_output_dim

logger = logging.get_logger(__name__)


def repeated_prompt_message(prompt: str) -> str:
    """The warning for inputs that carry the built-in prompt a second time."""
    return (
        f"the input starts with the prompt {prompt!r}, which this model's tokenizer already adds to every text, so "
        "the model reads it twice: do not pass it again (no prompt= / prompt_name= in sentence-transformers, no "
        "prefix in the texts)"
    )


def warn_repeated_prompt(model: torch.nn.Module, input_ids: torch.LongTensor) -> None:
    """Warn once per model (``model.prompt_warned``) when a row of ``input_ids`` reads ``cls``, the built-in prompt
    (``config.prompt_ids``) and the prompt again: a user who passed the prompt that the tokenizer already adds. One
    comparison per batch, in eval mode only (training inputs are the collator's)."""
    prompt = getattr(model.config, "prompt_ids", None)
    if not prompt or model.training or getattr(model, "prompt_warned", False):
        return
    twice = torch.tensor(list(prompt) * 2, device=input_ids.device)
    if input_ids.shape[1] < 1 + len(twice) or not bool(input_ids[:, 1 : 1 + len(twice)].eq(twice).all(1).any()):
        return
    model.prompt_warned = True
    logger.warning(repeated_prompt_message(model.config.prompt or str(prompt)))


def stack_padded(*parts: tuple[torch.Tensor, torch.Tensor | None], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate right-padded id batches of different widths along the batch axis."""
    width = max(ids.shape[1] for ids, _ in parts)
    ids = torch.cat([F.pad(i, (0, width - i.shape[1]), value=pad_id) for i, _ in parts])
    masks = [m if m is not None else i.ne(pad_id) for i, m in parts]
    mask = torch.cat([F.pad(m.long(), (0, width - m.shape[1]), value=0) for m in masks])
    return ids, mask


def tokenize(
    tokenizer, texts: list[str], max_length: int | None, truncation: bool = True
) -> tuple[list[list[int]], list[bool]]:
    """The token ids of every text as the model reads them (special tokens and a prompt the tokenizer adds included),
    cut to ``max_length`` tokens with ``truncation`` (None: not cut), in one tokenizer call; and which texts were cut.

    A fast tokenizer keeps what it cut of each text (its encoding's ``overflowing``); with another, only a text of
    exactly ``max_length`` tokens may have been cut, and those texts alone are counted again whole."""
    if not texts:  # tokenizers fail on an empty batch
        return [], []
    truncation = truncation and max_length is not None
    batch = tokenizer(texts, truncation=truncation, max_length=max_length)
    ids = batch["input_ids"]
    if not truncation:
        return ids, [False] * len(ids)
    if batch.encodings is not None:
        return ids, [bool(encoding.overflowing) for encoding in batch.encodings]
    full = [i for i, row in enumerate(ids) if len(row) == max_length]
    whole = tokenizer([texts[i] for i in full])["input_ids"] if full else []
    over = {i for i, row in zip(full, whole) if len(row) > max_length}
    return ids, [i in over for i in range(len(ids))]


def pad_ids(rows: Sequence[Sequence[int]], pad_id: int, side: str = "right") -> torch.Tensor:
    """Token id rows as one LongTensor [len(rows), longest], padded with ``pad_id`` on ``side``."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        start = 0 if side == "right" else width - len(row)
        ids[i, start : start + len(row)] = torch.tensor(row, dtype=torch.long)
    return ids


@contextlib.contextmanager
def inference(model: torch.nn.Module, autocast_dtype: torch.dtype | None) -> Iterator[None]:
    """``model`` in eval mode (its mode restored after), without autograd, under autocast to ``autocast_dtype`` on its
    device (None: off)."""
    was_training = model.training
    model.eval()
    try:
        with (
            torch.inference_mode(),
            torch.autocast(model.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None),
        ):
            yield
    finally:
        model.train(was_training)


def encode_texts(
    model: torch.nn.Module,
    pooled: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    tokenizer,
    texts: str | list[str],
    *,
    limit: int,
    dim: int,
    max_tokens: int = 16000,
    batch_size: int = 512,
    normalize: bool = False,
    convert_to_tensor: bool = False,
    truncation: bool = False,
    max_length: int | None = None,
    autocast_dtype: torch.dtype | None = None,
    sort_by_length: bool = True,
    show_progress: bool | None = None,
):
    """The ``encode`` of every hf_tlaser model: ``texts`` -> float32 numpy [N, dim] in input order (a tensor with
    ``convert_to_tensor``); a single ``str`` gives one vector [dim], an empty list [0, dim].

    ``pooled(input_ids, attention_mask) -> [b, dim]`` runs on ``model.device`` in eval mode (``model``'s mode is
    restored) under autocast to ``autocast_dtype`` (None: off) on right-padded batches, longest first, of rows x
    padded length <= ``max_tokens`` (at most ``batch_size`` rows). Inputs over ``limit`` tokens (the model's
    ``max_position_embeddings``) raise ValueError unless ``truncation``.
    """
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    encoded, _ = tokenize(tokenizer, texts, max_length or limit, truncation)
    too_long = [i for i, ids in enumerate(encoded) if len(ids) > limit]
    if too_long:
        raise ValueError(
            f"{len(too_long)} input(s) exceed max_position_embeddings={limit} tokens (first: text #{too_long[0]}"
            f" with {len(encoded[too_long[0]])} tokens); pass truncation=True to cut them"
        )
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i])) if sort_by_length else range(len(encoded))
    batches, current, width = [], [], 0
    for i in order:
        new_width = max(width, len(encoded[i]))
        if current and (new_width * (len(current) + 1) > max_tokens or len(current) >= batch_size):
            batches.append(current)
            current, new_width = [], len(encoded[i])
        current.append(i)
        width = new_width
    if current:
        batches.append(current)
    pad_id = tokenizer.pad_token_id
    out = torch.empty(len(encoded), dim, dtype=torch.float32)
    progress = logging.tqdm(
        batches, desc="encode", unit="batch", disable=not (len(batches) > 4 if show_progress is None else show_progress)
    )
    with inference(model, autocast_dtype):
        for batch in progress:
            ids = pad_ids([encoded[i] for i in batch], pad_id).to(model.device)
            out[torch.tensor(batch)] = pooled(ids, ids.ne(pad_id).long()).float().cpu()
    if normalize:
        out = F.normalize(out, dim=-1)
    if single:
        out = out[0]
    return out if convert_to_tensor else out.numpy()


class SentenceEncoderMixin:
    """``encode`` for encoder models whose forward returns ``pooler_output`` as the sentence vector; their saved
    folders get the sentence-transformers layout (``ModelFolderMixin.save_pretrained``).

    ``frozen`` (set by ``hf-tlaser train --freeze-encoder-steps``): the forward computes no gradient, so none
    reaches the encoder's weights and its backward costs nothing. ``prompt_warned``: this model has warned that its
    input repeats the built-in prompt (``warn_repeated_prompt``)."""

    frozen: bool = False
    prompt_warned: bool = False

    def sentence_vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The sentence vectors [B, d] of a right-padded batch (the last encoder layer computes the pooled position
        only)."""
        return self(input_ids=input_ids, attention_mask=attention_mask, pooled_only=True).pooler_output

    def encode(
        self,
        texts: str | list[str],
        tokenizer,
        *,
        max_tokens: int = 16000,
        batch_size: int = 512,
        normalize: bool = False,
        convert_to_tensor: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
        autocast_dtype: torch.dtype | None = None,
        sort_by_length: bool = True,
        show_progress: bool | None = None,
    ):
        """Embed ``texts``; returns a float32 numpy array [N, d] in input order (a tensor if ``convert_to_tensor``).

        A single ``str`` is one text and gives one vector [d] (as sentence-transformers); an empty list gives [0, d].
        Sentences are sorted by length and grouped so that rows x padded length stays under ``max_tokens``
        (at most ``batch_size`` rows); the last encoder layer only computes the pooled position. An empty string
        embeds ``STR_TAG </s>``. Inputs longer than ``max_position_embeddings`` raise unless ``truncation=True``.
        """
        return encode_texts(
            self,
            self.sentence_vectors,
            tokenizer,
            texts,
            limit=self.config.max_position_embeddings,
            dim=head_output_dim(
                getattr(self.config, "sentence_modules", None),
                getattr(self.config, "teacher_dim", None) or self.config.hidden_size,
            ),
            max_tokens=max_tokens,
            batch_size=batch_size,
            normalize=normalize,
            convert_to_tensor=convert_to_tensor,
            truncation=truncation,
            max_length=max_length,
            autocast_dtype=autocast_dtype,
            sort_by_length=sort_by_length,
            show_progress=show_progress,
        )
