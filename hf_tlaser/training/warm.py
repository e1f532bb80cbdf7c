"""``hf-tlaser train --init-from SPEC``: a transformer member (T-LASER, cT-LASER, LDT) whose encoder starts from a
pretrained Hugging Face encoder (SONAR, MEXMA and LaBSE start from one): the backbone's weights and tokenizer, no
joint BPE, the member's own pooling, decoder, language embedding and losses.

* SPEC: a Hugging Face encoder folder or Hub id, or a sentence-transformers folder (its Transformer module, its
  pooling as the ``backbone`` pooling choice, its prompt, which the saved tokenizer prepends to every text, and its
  Dense / Normalize modules after pooling, carried as ``config.sentence_modules``; any other module is refused).
* The backbone's config is nested in the member's (``config.backbone``); the member's ``hidden_size`` is the
  backbone's. The decoder reads the final sentence vector (after the carried modules): the backbone's width, or the
  last Dense's output width.
* ``--decoder-vocab targets`` restricts the decoder to the pieces of the training targets (a 99k-250k softmax is
  what decides the speed on a CPU); ``--freeze-encoder-steps`` and ``--encoder-lr`` protect the pretrained space
  from a decoder at random init.

The LSTM members (LASER_1/6, cLASER, Yu 2018) are refused: their encoder is a BiLSTM over their own embeddings,
which no pretrained transformer's weights fit; only its embedding table could be reused.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import torch
from safetensors import safe_open
from tokenizers import Tokenizer, processors
from transformers import (
    AutoConfig,
    AutoModel,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

from hf_tlaser.errors import UsageError
from hf_tlaser.model_folders import EVAL_PROMPTS, choose_prompt, model_folder
from hf_tlaser.models.common.pooling import describe_modules
from hf_tlaser.models.common.st_folder import (
    CarriedModules,
    FolderFormatError,
    read_json,
    read_sentence_transformers_folder,
    saved_head_weights,
)
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.tokenization import MODEL_INPUT_NAMES
from hf_tlaser.training.resolve import Built, Plugin, RunPlan
from hf_tlaser.training.spec import INIT_HINT
from hf_tlaser.training.student import freeze_bottom, keep_layers, member_backbone_weights, student_layers

logger = logging.getLogger("hf_tlaser.train")

UNK_SAMPLE = 2000
"""Texts per language whose ``<unk>`` share is measured."""
UNK_WARNING = 0.05
"""Share of ``<unk>`` pieces in a language's text above which the backbone's tokenizer is said to miss it."""
"""sentence-transformers pooling modes the members can reproduce."""
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""The special tokens a decoder reads or writes (not ``<mask>``, often the last id)."""
PROMPT_ENTRY = "PROMPT"
"""Name of the prompt's entry in the saved tokenizer's template."""
SAFETENSORS_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
ENCODER_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
"""Config fields of the member that the backbone decides (a preset's values for them are ignored)."""


@dataclass
class Backbone:
    """A checked ``--init-from`` SPEC: its (Transformer module's) folder and identity, config, fast tokenizer (with
    the prompt in its template), the sentence-transformers pooling and prompt (None where it has none) and the
    modules after its pooling that the member carries."""

    spec: str
    folder: Path
    identity: str
    config: PretrainedConfig
    tokenizer: PreTrainedTokenizerFast
    pooling: str | None
    prompt: str | None
    carried: CarriedModules = field(default_factory=CarriedModules)
    layers: tuple[int, ...] | None = None
    """The pretrained layers the member keeps (``--init-layers``; None: all); ``config`` has their number."""
    depth: int = 0
    """The pretrained model's number of layers."""
    member: bool = False
    """The SPEC is an hf_tlaser member trained with ``--init-from``: its backbone's weights start this one."""
    languages: tuple[str, ...] = ()
    """A member's training languages (its ``training_languages``): the new run's model was trained on them too."""

    @property
    def stored_dtype(self) -> torch.dtype | None:
        """The dtype of the floating tensors in the backbone's safetensors files, whatever its config says (e5's
        copy: float16 tensors, a float32 config); None where they hold several or there are none."""
        stored = set()
        for path in self.folder.glob("*.safetensors"):
            with safe_open(path, "pt") as weights:
                stored |= {weights.get_slice(key).get_dtype() for key in weights.keys()}
        floating = {SAFETENSORS_DTYPES[name] for name in stored if name in SAFETENSORS_DTYPES}
        return floating.pop() if len(floating) == 1 else None

    @property
    def name(self) -> str:
        """The model's name for the log: the SPEC's last part (``multilingual-e5-small``)."""
        return Path(self.spec.split("@", 1)[0].rstrip("/\\")).name or self.spec

    def describe(self) -> str:
        prompt = f"prompt {self.prompt!r}" if self.prompt else "no prompt"
        pooling = f"its pooling {self.pooling}" if self.pooling else "no pooling of its own"
        if self.carried.entries:
            pooling += f", then {describe_modules(self.carried.entries)}"
        depth = f"{self.config.num_hidden_layers} layers"
        if self.layers is not None:
            depth += f" of its {self.depth}: {','.join(map(str, self.layers))}"
        return (
            f"{self.config.model_type} {self.identity} ({self.config.hidden_size} wide, {depth}, "
            f"{len(self.tokenizer)} pieces, {pooling}, {prompt})"
        )

    def weights(self) -> dict[str, torch.Tensor]:
        """The pretrained encoder's weights as the member's ``encoder.backbone`` names them (its kept layers only,
        renumbered, for ``--init-layers``)."""
        if self.member:
            state = member_backbone_weights(self.folder)
        else:
            config = self.config if self.layers is None else AutoConfig.from_pretrained(self.folder)
            try:
                pretrained = AutoModel.from_pretrained(self.folder, config=config, add_pooling_layer=False)
            except TypeError:  # an encoder class without a pooler option
                pretrained = AutoModel.from_pretrained(self.folder, config=config)
            state = pretrained.state_dict()
        return state if self.layers is None else keep_layers(state, self.layers)

    def load_into(self, encoder: torch.nn.Module) -> None:
        """Copy the pretrained weights into ``encoder.backbone`` (and the carried modules' into
        ``encoder.sentence_head``); RuntimeError if a weight of it is missing."""
        missing, _ = encoder.backbone.load_state_dict(self.weights(), strict=False)
        if missing:
            raise RuntimeError(f"--init-from {self.spec}: no pretrained weights for {missing[:5]}")
        if self.carried.entries:
            encoder.sentence_head.load_state_dict(self.carried.weights)


def member_backbone(spec: str, folder: Path, identity: str, saved: dict, where: str) -> Backbone:
    """An hf_tlaser member trained with ``--init-from`` as the start of another (its layer-reduced student): the
    nested backbone config, the member's tokenizer, pooling, prompt and carried modules; the weights come from its
    ``backbone`` (``member_backbone_weights``)."""
    nested = dict(saved["backbone"])
    config = AutoConfig.for_model(nested.pop("model_type"), **nested)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # noqa: BLE001 - any loading failure is the user's folder
        raise UsageError(f"{where}: cannot load its tokenizer ({' '.join(str(err).split())[:200]})") from None
    weights = saved_head_weights(folder)
    carried = CarriedModules(
        list(saved.get("sentence_modules") or []),
        {f"{index}.{name}": value for index, named in weights.items() for name, value in named.items()},
    )
    prompt = saved.get("prompt")
    pooling = saved.get("pooling") or "cls"
    languages = tuple(saved.get("training_languages") or ())
    return Backbone(
        spec, folder, identity, config, tokenizer, pooling, prompt, carried, member=True, languages=languages
    )


def sentence_transformers_parts(folder: Path, where: str) -> tuple[Path, str | None, dict, str | None, CarriedModules]:
    """:func:`~hf_tlaser.models.common.st_folder.read_sentence_transformers_folder`; its FolderFormatError as a
    UsageError naming ``where``."""
    try:
        return read_sentence_transformers_folder(folder)
    except FolderFormatError as err:
        raise UsageError(f"{where}: {err}") from None


def prompt_pieces(tokenizer: PreTrainedTokenizerBase, prompt: str) -> list[int]:
    """The pieces of ``prompt`` that the template adds after ``cls`` (a trailing space is the next word's boundary:
    ``"query: " + text`` tokenizes as ``query:`` then ``▁text``)."""
    return tokenizer(prompt.rstrip(), add_special_tokens=False)["input_ids"]


def with_prompt(tokenizer: PreTrainedTokenizerFast, prompt: str | None) -> PreTrainedTokenizerFast:
    """A copy of ``tokenizer`` whose template reads ``cls [prompt pieces] text eos`` for one text (and ``... eos eos
    ...`` for a pair): every user of the saved tokenizer (the training collator, ``encode``, sentence-transformers,
    ``pipeline``) then prepends the prompt. Decoder targets (``add_special_tokens=False``) get none."""
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())  # a copy: ``tokenizer`` stays as it was
    cls, eos = tokenizer.cls_token, tokenizer.eos_token
    special = [(token, tokenizer.convert_tokens_to_ids(token)) for token in (cls, eos)]
    front = [cls]
    if prompt:  # one template entry of several pieces (a piece such as ":" cannot name an entry)
        pieces = prompt_pieces(tokenizer, prompt)
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


def check_backbone(
    spec: str, model: str, tokenizer_flag: str | None, prompt_name: str | None = "auto", layers: str | None = None
) -> Backbone:
    """Load and check an ``--init-from`` SPEC for ``--model`` (config and tokenizer; the weights come later):
    UsageError (one line) for ``--tokenizer`` given too, a SPEC that cannot be loaded, a model that is not an encoder,
    or a tokenizer without a fast version. ``model`` takes a backbone (``RunSpec.check_families`` refused others)."""
    where = f"--init-from {spec!r}"
    if tokenizer_flag:
        raise UsageError(f"--init-from trains with the backbone's tokenizer: drop --tokenizer {tokenizer_flag}")
    folder, identity = model_folder(spec, where, hint=INIT_HINT)
    saved = read_json(folder / "config.json")
    if isinstance(saved, dict) and saved.get("model_type") in FAMILIES and saved.get("backbone"):
        return reduced(member_backbone(spec, folder, identity, saved, where), layers)
    transformer, pooling, prompts, default_prompt, carried = sentence_transformers_parts(folder, where)
    if not (transformer / "config.json").is_file():
        raise UsageError(f"{where}: no config.json in {transformer}; give {INIT_HINT}")
    try:
        config = AutoConfig.from_pretrained(transformer)
    except Exception as err:  # noqa: BLE001 - any loading failure is the user's folder
        raise UsageError(f"{where}: cannot read its config ({' '.join(str(err).split())[:200]})") from None
    kind = config.model_type
    if config.model_type in FAMILIES:
        raise UsageError(
            f"{where} is an hf_tlaser {kind} model trained without --init-from: continue it with --resume, or teach "
            "with --teacher"
        )
    if getattr(config, "is_encoder_decoder", False):
        raise UsageError(f"{where} is a sequence-to-sequence model ({kind}); give an encoder-only model")
    if kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise UsageError(f"{where} is a decoder-only language model ({kind}); give an encoder-only model")
    causal_heads = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()) - set(MODEL_FOR_MASKED_LM_MAPPING_NAMES.values())
    causal = [name for name in config.architectures or [] if name in causal_heads]
    if getattr(config, "is_decoder", False) or causal:
        why = f"architecture {causal[0]}" if causal else "is_decoder=True"
        raise UsageError(
            f"{where} is configured as a decoder ({why}): its causal mask hides every later token from each "
            "position; give an encoder-only model"
        )
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
    return reduced(Backbone(spec, transformer, identity, config, tokenizer, pooling, prompt, carried), layers)


def reduced(backbone: Backbone, layers: str | None) -> Backbone:
    """``backbone`` with its prompt in the tokenizer's template and, for ``--init-layers``, the kept layers (its
    config at their number)."""
    backbone.tokenizer = with_prompt(backbone.tokenizer, backbone.prompt)
    backbone.depth = backbone.config.num_hidden_layers
    if layers is not None:
        backbone.layers = student_layers(layers, backbone.depth)
        backbone.config = copy.deepcopy(backbone.config)
        backbone.config.num_hidden_layers = len(backbone.layers)
    return backbone


def backbone_overrides(backbone: Backbone, pooling: str, overrides: dict) -> dict:
    """The member's config values that follow the backbone: the nested config, its width and depth (a preset's are
    ignored, with a note), the longest input and the pooling (``backbone``: the sentence-transformers pooling,
    else the member's ``cls``). The nested config keeps no half-precision ``dtype``: transformers builds a nested
    model in it, a float16 copy beside a float32 decoder (the copy follows the member's dtype; a float32 one stays, as
    earlier runs recorded it)."""
    config = backbone.config
    nested = config.to_dict()
    if nested.get("dtype") not in (None, "float32"):
        nested["dtype"] = None
    ignored = sorted(name for name in ENCODER_SIZES if name in overrides)
    if ignored:
        logger.warning("--init-from: the backbone decides %s; the --set values are ignored", ", ".join(ignored))
    limit = min(backbone.tokenizer.model_max_length, getattr(config, "max_position_embeddings", 512))
    values = {name: getattr(config, name) for name in ENCODER_SIZES if hasattr(config, name)}
    return {
        **overrides,
        **values,
        "backbone": nested,
        "max_position_embeddings": int(limit),
        "pooling": (backbone.pooling or "cls") if pooling == "backbone" else pooling,
        "sentence_modules": backbone.carried.entries or None,
        "prompt": backbone.prompt,
        "prompt_ids": prompt_pieces(backbone.tokenizer, backbone.prompt) if backbone.prompt else None,
        "training_languages": list(backbone.languages),
    }


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


class WarmStart(Plugin):
    """``--init-from``: the backbone checked before any data is read; its config values, its tokenizer (a fresh
    run's), its weights copied into the built model (a fresh run's), the ``<unk>`` share of each language, and the
    saved weights' dtype."""

    def __init__(self, backbone: Backbone, plan: RunPlan) -> None:
        self.backbone, self.spec = backbone, plan.spec
        logger.info("--init-from: %s", backbone.describe())
        self.config = backbone_overrides(backbone, plan.pooling, plan.config)
        self.tokenizer = backbone.tokenizer, f"--init-from {plan.spec.init_from}"
        self.fit_options = {"save_dtype": backbone.stored_dtype}
        self.describes = f" on {backbone.name}"

    @classmethod
    def check(cls, plan: RunPlan) -> WarmStart:
        spec = plan.spec
        backbone = check_backbone(spec.init_from, spec.model, spec.tokenizer, layers=spec.init_layers)
        depth = backbone.config.num_hidden_layers
        if spec.freeze_layers is not None and not 0 <= spec.freeze_layers < depth:
            raise UsageError(
                f"--freeze-layers {spec.freeze_layers}: give 0 to {depth - 1} (the encoder has {depth} layers; at "
                "least the top one trains)"
            )
        return cls(backbone, plan)

    def attach(self, built: Built):
        if not built.resumed:
            self.backbone.load_into(built.model.encoder)
        if self.spec.freeze_word_embeddings:  # before the optimizer is built: it then holds no state for them
            built.model.encoder.get_input_embeddings().weight.requires_grad_(False)
        if self.spec.freeze_layers:
            frozen = freeze_bottom(built.model.encoder, self.spec.freeze_layers)
            logger.info(
                "--freeze-layers %d: %d of the encoder's parameters frozen (its embeddings and layers 0-%d)",
                self.spec.freeze_layers,
                frozen,
                self.spec.freeze_layers - 1,
            )
        if not self.spec.streaming:
            texts = built.dataset.dataset
            samples = {lang: list(islice(filter(None, texts[lang]), UNK_SAMPLE)) for lang in built.data.languages}
            unk_rates(built.tokenizer, samples)
        return built.collator
