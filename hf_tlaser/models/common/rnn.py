"""Recurrent layers on CPU under autocast, and the right-padded lengths a packed RNN encoder reads (LASER, Yu 2018,
cNV)."""

from __future__ import annotations

import functools

import torch


def cpu_autocast_lacks_rnn() -> bool:
    """True under CPU autocast to a dtype this CPU's oneDNN has no RNN kernel for (bf16 without native bf16, fp16
    without AVX512-FP16/AMX-FP16): there ``nn.LSTM`` / ``nn.GRU`` raise "could not create a primitive descriptor"."""
    if not torch.is_autocast_enabled("cpu"):
        return False
    dtype = torch.get_autocast_dtype("cpu")
    check = {torch.bfloat16: "_is_mkldnn_bf16_supported", torch.float16: "_is_mkldnn_fp16_supported"}.get(dtype)
    if check is None:
        return False
    try:
        supported = getattr(torch.ops.mkldnn, check)()
    except (AttributeError, RuntimeError):  # a torch build without oneDNN: stay on the safe side
        return True
    return not (supported and cpu_rnn_runs_in(dtype))


@functools.cache
def cpu_rnn_runs_in(dtype: torch.dtype) -> bool:
    """Whether a tiny ``nn.LSTM`` runs on this CPU under autocast to ``dtype``: oneDNN may report the dtype as
    supported and still lack its RNN primitive (fp16 on a Xeon with AVX512-FP16 and AMX): the kernel is tried once."""
    try:  # with gradients (even when called under inference mode): the training primitive is the one that may lack
        with torch.inference_mode(False), torch.enable_grad():
            lstm = torch.nn.LSTM(2, 2, batch_first=True)
            with torch.autocast("cpu", dtype=dtype):
                output, _ = lstm(torch.zeros(1, 1, 2))
            output.float().sum().backward()
    except RuntimeError:
        return False
    return True


def run_rnn(rnn: torch.nn.RNNBase, inputs, state=None):
    """``rnn(inputs, state)`` (LSTM or GRU), in fp32 with autocast off where the CPU cannot run it in the autocast
    dtype.

    ``inputs`` is a tensor or a ``PackedSequence``; the outputs are then fp32 (the ops after the RNN autocast
    again). On CUDA and on CPUs with native bf16 the RNN runs under autocast as usual.
    """
    if inputs.data.device.type != "cpu" or not cpu_autocast_lacks_rnn():
        return rnn(inputs, state)
    if state is not None:
        state = tuple(s.float() for s in state) if isinstance(state, tuple) else state.float()
    with torch.autocast("cpu", enabled=False):
        return rnn(inputs.float(), state)


def right_padded_lengths(
    input_ids: torch.LongTensor, attention_mask: torch.Tensor | None, config, name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mask (default: ids != pad) and lengths of right-padded inputs for a packed RNN encoder; ValueError for an
    input longer than ``config.max_position_embeddings``, an empty row or padding that is not on the right."""
    seq_len = input_ids.shape[1]
    limit = config.max_position_embeddings
    if seq_len > limit:
        raise ValueError(
            f"input of {seq_len} tokens exceeds max_position_embeddings={limit}; truncate it "
            "(tokenizer(..., truncation=True, max_length=...)) or raise max_position_embeddings"
        )
    mask = (input_ids.ne(config.pad_token_id) if attention_mask is None else attention_mask).bool()
    lengths = mask.sum(1)
    if bool((lengths == 0).any()):
        raise ValueError("every row needs at least one non-pad token (STR_TAG ... </s>)")
    if not torch.equal(mask, torch.arange(seq_len, device=mask.device)[None] < lengths[:, None]):
        raise ValueError(f"{name} expects right-padded inputs: attention_mask must be 1...1 0...0 per row")
    return mask, lengths
