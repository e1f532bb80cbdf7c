"""``hf-tlaser train --init-from SPEC``: a transformer member (T-LASER, cT-LASER, LDT) whose encoder starts from a
pretrained Hugging Face encoder (SONAR, MEXMA and LaBSE start from one): the backbone's weights and tokenizer, no
joint BPE, the member's own pooling, decoder, language embedding and losses.

* SPEC: a Hugging Face encoder folder or Hub id, or a sentence-transformers folder (its Transformer module, its
  pooling as the ``backbone`` pooling choice and its prompt, which the saved tokenizer prepends to every text).
* The backbone's config is nested in the member's (``config.backbone``); the member's ``hidden_size`` is the
  backbone's, so the decoder reads the backbone's width.
* ``--decoder-vocab targets`` restricts the decoder to the pieces of the training targets (a 99k-250k softmax is
  what decides the speed on a CPU); ``--freeze-encoder-steps`` and ``--encoder-lr`` protect the pretrained space
  from a decoder at random init.

The LSTM members (LASER_1/6, cLASER, Yu 2018) are refused: their encoder is a BiLSTM over their own embeddings,
which no pretrained transformer's weights fit; only its embedding table could be reused.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, processors
from transformers import AutoConfig, AutoModel, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerFast
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

from hf_tlaser.errors import UsageError
from hf_tlaser.teachers import EVAL_PROMPTS, choose_prompt, model_folder
from hf_tlaser.tokenization import MODEL_INPUT_NAMES

logger = logging.getLogger("hf_tlaser.train")

BACKBONE_MEMBERS = ("tlaser", "ctlaser", "ldt")
"""The members whose encoder a pretrained transformer can replace."""
INIT_HINT = "a Hugging Face encoder folder or Hub id (XLM-R, BERT, e5, LaBSE, ...) or a sentence-transformers folder"
DECODER_VOCABS = ("full", "targets")
POOLING_CHOICES = ("cls", "mean", "backbone")
UNK_WARNING = 0.05
"""Share of ``<unk>`` pieces in a language's text above which the backbone's tokenizer is said to miss it."""
ST_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
"""sentence-transformers pooling modes the members can reproduce."""
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
DECODER_SPECIALS = ("pad_token", "eos_token", "unk_token", "cls_token", "bos_token")
"""The special tokens a decoder reads or writes (not ``<mask>``, often the last id)."""
PROMPT_ENTRY = "PROMPT"
"""Name of the prompt's entry in the saved tokenizer's template."""
ENCODER_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
"""Config fields of the member that the backbone decides (a preset's values for them are ignored)."""


@dataclass
class Backbone:
    """A checked ``--init-from`` SPEC: its (Transformer module's) folder and identity, config, fast tokenizer (with
    the prompt in its template), the sentence-transformers pooling and prompt (None where it has none)."""

    spec: str
    folder: Path
    identity: str
    config: PretrainedConfig
    tokenizer: PreTrainedTokenizerFast
    pooling: str | None
    prompt: str | None

    def describe(self) -> str:
        prompt = f"prompt {self.prompt!r}" if self.prompt else "no prompt"
        pooling = f"its pooling {self.pooling}" if self.pooling else "no pooling of its own"
        return (
            f"{self.config.model_type} {self.identity} ({self.config.hidden_size} wide, "
            f"{self.config.num_hidden_layers} layers, {len(self.tokenizer)} pieces, {pooling}, {prompt})"
        )

    def load_into(self, encoder: torch.nn.Module) -> None:
        """Copy the pretrained weights into ``encoder.backbone``; RuntimeError if a weight of it is missing."""
        try:
            pretrained = AutoModel.from_pretrained(self.folder, config=self.config, add_pooling_layer=False)
        except TypeError:  # an encoder class without a pooler option
            pretrained = AutoModel.from_pretrained(self.folder, config=self.config)
        missing, _ = encoder.backbone.load_state_dict(pretrained.state_dict(), strict=False)
        if missing:
            raise RuntimeError(f"--init-from {self.spec}: no pretrained weights for {missing[:5]}")


def _read_json(path: Path) -> dict | list | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def sentence_transformers_parts(folder: Path, where: str) -> tuple[Path, str | None, dict, str | None]:
    """``(transformer folder, pooling, prompts, default prompt name)`` of a sentence-transformers folder; the folder
    itself, None, {} and None for a plain Hugging Face one. UsageError for a pooling the members cannot reproduce."""
    modules = _read_json(folder / "modules.json")
    if not modules:
        return folder, None, {}, None
    by_type = {module["type"].rsplit(".", 1)[-1]: module for module in modules}
    if "Transformer" not in by_type:
        raise UsageError(f"{where}: its modules.json has no Transformer module to start from")
    transformer = folder / by_type["Transformer"].get("path", "")
    pooling = None
    if "Pooling" in by_type:
        settings = _read_json(folder / by_type["Pooling"]["path"] / "config.json") or {}
        if isinstance(settings.get("pooling_mode"), str):  # sentence-transformers >= 6: "pooling_mode": "mean"
            modes = [settings["pooling_mode"] if settings["pooling_mode"] in ("cls", "mean") else None]
        else:  # the pooling_mode_* booleans of earlier releases
            modes = [ST_POOLING.get(key) for key, on in settings.items() if key.startswith("pooling_mode") and on]
        if len(modes) != 1 or modes[0] is None:
            raise UsageError(f"{where}: its pooling {settings} is not one the members reproduce (cls or mean)")
        pooling = modes[0]
    st_config = _read_json(folder / "config_sentence_transformers.json") or {}
    return transformer, pooling, st_config.get("prompts") or {}, st_config.get("default_prompt_name")


def with_prompt(tokenizer: PreTrainedTokenizerFast, prompt: str | None) -> PreTrainedTokenizerFast:
    """A copy of ``tokenizer`` whose template reads ``cls [prompt pieces] text eos`` for one text (and ``... eos eos
    ...`` for a pair): every user of the saved tokenizer (the training collator, ``encode``, sentence-transformers,
    ``pipeline``) then prepends the prompt. Decoder targets (``add_special_tokens=False``) get none."""
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())  # a copy: ``tokenizer`` stays as it was
    cls, eos = tokenizer.cls_token, tokenizer.eos_token
    special = [(token, tokenizer.convert_tokens_to_ids(token)) for token in (cls, eos)]
    front = [cls]
    if prompt:  # one template entry of several pieces (a piece such as ":" cannot name an entry)
        # a trailing space is the next word's boundary ("query: " + text tokenizes as "query:" then "▁text")
        pieces = tokenizer(prompt.rstrip(), add_special_tokens=False)["input_ids"]
        tokens = tokenizer.convert_ids_to_tokens(pieces)
        special.append({"id": PROMPT_ENTRY, "ids": pieces, "tokens": tokens})
        front.append(PROMPT_ENTRY)
    backend.post_processor = processors.TemplateProcessing(
        single=[*front, "$A", eos], pair=[*front, "$A", eos, eos, "$B", eos], special_tokens=special
    )
    names = {name: getattr(tokenizer, name, None) for name in SPECIAL_TOKENS}
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        padding_side="right",
        model_max_length=tokenizer.model_max_length,
        model_input_names=MODEL_INPUT_NAMES,
        **{name: str(value) for name, value in names.items() if value is not None},
    )


def check_backbone(spec: str, model: str, tokenizer_flag: str | None, prompt_name: str | None = "auto") -> Backbone:
    """Load and check an ``--init-from`` SPEC for ``--model`` (config and tokenizer; the weights come later):
    UsageError (one line) for a member without a transformer encoder, ``--tokenizer`` given too, a SPEC that cannot
    be loaded, a model that is not an encoder, or a tokenizer without a fast version."""
    where = f"--init-from {spec!r}"
    if model not in BACKBONE_MEMBERS:
        raise UsageError(
            f"--init-from: --model {model} encodes with a BiLSTM over its own embeddings, which no pretrained "
            f"transformer's weights fit; use one of {', '.join(BACKBONE_MEMBERS)}"
        )
    if tokenizer_flag:
        raise UsageError(f"--init-from trains with the backbone's tokenizer: drop --tokenizer {tokenizer_flag}")
    folder, identity = model_folder(spec, where, hint=INIT_HINT)
    transformer, pooling, prompts, default_prompt = sentence_transformers_parts(folder, where)
    if not (transformer / "config.json").is_file():
        raise UsageError(f"{where}: no config.json in {transformer}; give {INIT_HINT}")
    try:
        config = AutoConfig.from_pretrained(transformer)
    except Exception as err:  # noqa: BLE001 - any loading failure is the user's folder
        raise UsageError(f"{where}: cannot read its config ({' '.join(str(err).split())[:200]})") from None
    kind = config.model_type
    if config.model_type in ("tlaser", "laser", "yu2018", "ldt", "cnv"):
        raise UsageError(f"{where} is an hf_tlaser {kind} model: continue it with --resume, or teach with --teacher")
    if getattr(config, "is_encoder_decoder", False):
        raise UsageError(f"{where} is a sequence-to-sequence model ({kind}); give an encoder-only model")
    if kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise UsageError(f"{where} is a decoder-only language model ({kind}); give an encoder-only model")
    try:
        tokenizer = AutoTokenizer.from_pretrained(transformer)
    except Exception as err:  # noqa: BLE001
        raise UsageError(f"{where}: cannot load its tokenizer ({' '.join(str(err).split())[:200]})") from None
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(f"{where}: its tokenizer has no fast version (tokenizer.json); convert it first")
    if tokenizer.eos_token is None and tokenizer.sep_token is not None:
        tokenizer.eos_token = tokenizer.sep_token  # BERT: [SEP] ends a text
    for name in ("cls_token", "eos_token", "pad_token"):
        if getattr(tokenizer, name) is None:
            raise UsageError(f"{where}: its tokenizer has no {name}; the members need cls, eos and pad tokens")
    _, prompt = choose_prompt(prompts, default_prompt, prompt_name, EVAL_PROMPTS, where)
    return Backbone(spec, transformer, identity, config, with_prompt(tokenizer, prompt), pooling, prompt)


def backbone_overrides(backbone: Backbone, pooling: str, overrides: dict) -> dict:
    """The member's config values that follow the backbone: the nested config, its width and depth (a preset's are
    ignored, with a note), the longest input and the pooling (``backbone``: the sentence-transformers pooling,
    else the member's ``cls``)."""
    config = backbone.config
    ignored = sorted(name for name in ENCODER_SIZES if name in overrides)
    if ignored:
        logger.warning("--init-from: the backbone decides %s; the --set values are ignored", ", ".join(ignored))
    limit = min(backbone.tokenizer.model_max_length, getattr(config, "max_position_embeddings", 512))
    values = {name: getattr(config, name) for name in ENCODER_SIZES if hasattr(config, name)}
    return {
        **overrides,
        **values,
        "backbone": config.to_dict(),
        "max_position_embeddings": int(limit),
        "pooling": (backbone.pooling or "cls") if pooling == "backbone" else pooling,
    }


def target_vocabulary(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> torch.LongTensor:
    """The decoder's restricted vocabulary: every piece of ``texts`` (the training targets) and every id up to the
    largest special token's (so that pad, ``</s>``, ``<unk>`` and the start token keep their ids), sorted."""
    special = max(getattr(tokenizer, f"{name}_id") for name in DECODER_SPECIALS if getattr(tokenizer, name, None))
    keep = set(range(special + 1))
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == 4096:
            keep.update(i for ids in tokenizer(batch, add_special_tokens=False)["input_ids"] for i in ids)
            batch = []
    if batch:
        keep.update(i for ids in tokenizer(batch, add_special_tokens=False)["input_ids"] for i in ids)
    return torch.tensor(sorted(keep), dtype=torch.long)


def unk_rates(tokenizer: PreTrainedTokenizerFast, texts_by_language: dict[str, list[str]]) -> dict[str, float]:
    """Share of ``<unk>`` pieces in each language's texts; a warning for each one above ``UNK_WARNING``."""
    rates = {}
    for lang, texts in texts_by_language.items():
        if not texts:
            continue
        ids = [i for row in tokenizer(texts, add_special_tokens=False)["input_ids"] for i in row]
        rates[lang] = sum(i == tokenizer.unk_token_id for i in ids) / max(len(ids), 1)
        if rates[lang] > UNK_WARNING:
            logger.warning(
                "--init-from: the backbone's tokenizer maps %.1f %% of the %s pieces to <unk>: its vocabulary "
                "misses this language",
                100 * rates[lang],
                lang,
            )
    return rates
