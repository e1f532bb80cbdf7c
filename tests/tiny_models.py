"""Tiny random models built in the tests (no downloads): an XLM-R backbone with a BPE of XLM-R's specials and
template, a BERT sentence-transformers folder with e5's prompts, a T-LASER folder, the widths shared by the model
tests' tiny configs and their tokenizer-free batches, and the arguments, log and checks of a tiny ``hf-tlaser train``
run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaModel

from hf_tlaser import TLaserConfig, TLaserForTranslation, save_tokenizer

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
PROMPTS = {"query": "query: ", "passage": "passage: "}
PAD, EOS, STR_TAG = 0, 2, 3
"""The ids of ``encoder_batch`` and ``label_batch``: padding, ``</s>`` and the language tag that starts a source."""
TINY_CONFIG = dict(vocab_size=100, dropout=0.0, max_position_embeddings=32)
"""What the tiny config of every model test starts from: a 100-id vocabulary, 32 positions, no dropout."""
NMT_TINY = dict(
    d_model=32, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_attention_heads=2,
    decoder_attention_heads=2, dropout=0.0,
)  # fmt: skip
"""The widths of a tiny Marian NMT model (cNV's translation pair): one layer a side, width 32."""


def encoder_batch(sentences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``STR_TAG tokens </s>`` ids and mask."""
    rows = [[STR_TAG, *s, EOS] for s in sentences]
    width = max(map(len, rows))
    ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    return ids, ids.ne(PAD).long()


def label_batch(sentences: list[list[int]]) -> torch.Tensor:
    """``tokens </s>`` padded with -100."""
    rows = [[*s, EOS] for s in sentences]
    width = max(map(len, rows))
    return torch.tensor([r + [-100] * (width - len(r)) for r in rows])


SOURCES = [[10, 11, 12], [13, 14], [15, 16, 17, 18]]
TARGETS = [[30, 31, 32, 33], [34, 35], [36, 37, 38]]


def pair_batch(sources: list[list[int]] = SOURCES, targets: list[list[int]] = TARGETS) -> dict[str, torch.Tensor]:
    """Both sides of the pairs as ``encoder_batch`` ids and masks (``input_ids``, ``tgt_input_ids`` and masks)."""
    ids, mask = encoder_batch(sources)
    tgt_ids, tgt_mask = encoder_batch(targets)
    return dict(input_ids=ids, attention_mask=mask, tgt_input_ids=tgt_ids, tgt_attention_mask=tgt_mask)


def st_modules():
    """sentence-transformers' module classes where its version keeps them."""
    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer import modules
    except ImportError:
        from sentence_transformers import models as modules
    return modules


def tiny_tokenizer(lines: list[str]) -> PreTrainedTokenizerFast:
    """A BPE with XLM-R's special tokens and template (``<s> text </s>``, Metaspace pieces)."""
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS))
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    names = dict(bos_token="<s>", cls_token="<s>", eos_token="</s>", sep_token="</s>", pad_token="<pad>")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", mask_token="<mask>", model_max_length=64, **names
    )


def save_tiny_xlmr(folder: Path, lines: list[str]) -> Path:
    """A random 2-layer XLM-R (width 32) and its ``tiny_tokenizer`` of ``lines``, as ``save_pretrained`` writes them."""
    tokenizer = tiny_tokenizer(lines)
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=66, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    XLMRobertaModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_st_model(folder: Path, tokenizer, hidden_size: int = 16, seed: int = 0, languages=("de", "en")) -> Path:
    """A tiny random BERT + mean pooling + normalisation as a sentence-transformers folder with e5's prompts and a
    model card listing ``languages``; no download."""
    from sentence_transformers import SentenceTransformer

    modules = st_modules()
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
    )
    BertModel(config).save_pretrained(folder / "hf")
    save_tokenizer(tokenizer, folder / "hf")
    transformer = modules.Transformer(str(folder / "hf"), max_seq_length=64)
    pooling = modules.Pooling(hidden_size, "mean")
    model = SentenceTransformer(modules=[transformer, pooling, modules.Normalize()], prompts=PROMPTS, device="cpu")
    model.save(str(folder / "st"))
    header = "---\nlanguage:\n" + "".join(f"- {lang}\n" for lang in languages) + "library_name: sentence-transformers\n"
    (folder / "st" / "README.md").write_text(header + "---\n# tiny\n")
    shutil.rmtree(folder / "hf")
    return folder / "st"


def save_tiny_tlaser(folder: Path, tokenizer, kwargs: dict) -> Path:
    """A random T-LASER of ``kwargs`` (seed 0) for de and en, with ``tokenizer``."""
    torch.manual_seed(0)
    TLaserForTranslation(TLaserConfig(**kwargs, training_languages=["de", "en"])).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    return folder


def save_warm_ctlaser(root: Path, backbone_dir: Path) -> Path:
    """A cT-LASER warm-started (before any update) from ``backbone_dir`` saved as a sentence-transformers model with
    e5's prompts (mean pooling, ``query: `` built into the saved tokenizer), as ``hf-tlaser train --init-from``
    builds it; returns ``root / "warm"``."""
    from sentence_transformers import SentenceTransformer

    from hf_tlaser.training.joint import model_config
    from hf_tlaser.training.presets import get_preset
    from hf_tlaser.training.warm import backbone_overrides, check_backbone

    modules = st_modules()
    layers = [modules.Transformer(str(backbone_dir)), modules.Pooling(32, pooling_mode="mean")]
    SentenceTransformer(modules=layers, prompts=PROMPTS).save(str(root / "st"))
    backbone = check_backbone(str(root / "st"), "ctlaser", None)
    preset = get_preset("ctlaser", "tiny")
    small = {"languages": ["en", "es"], "decoder_attention_heads": 2, "decoder_ffn_dim": 64, "dropout": 0.0}
    member = preset.model_class(
        model_config(preset, backbone.tokenizer, "st", backbone_overrides(backbone, "backbone", small))
    )
    backbone.load_into(member.encoder)
    member.save_pretrained(root / "warm")
    backbone.tokenizer.save_pretrained(root / "warm")
    return root / "warm"


def tiny_run_args(
    model: str, tiny: list[str], out: Path, tokenizer_dir: Path, *extra: str, max_tokens: int = 1000
) -> list[str]:
    """``hf-tlaser train`` arguments of a tiny ``model`` run on 2000 lines of newstest: ``--set`` of each of ``tiny``
    (``KEY=VALUE``), micro-batches and updates of ``max_tokens``, fp32, seed 3, a log line every update, then
    ``extra``."""
    args = [
        "--model", model, "--preset", "tiny", "--corpora", "wmt-newstest-multiway", "--max-lines", "2000",
        "--tokenizer", str(tokenizer_dir), "--output-dir", str(out), "--max-tokens", str(max_tokens),
        "--update-tokens", str(max_tokens), "--warmup-updates", "5", "--learning-rate", "3e-3", "--logging-steps", "1",
        "--save-steps", "1000", "--precision", "fp32", "--seed", "3",
    ]  # fmt: skip
    return args + [f"--set={item}" for item in tiny] + list(extra)


def logged_steps(out: Path) -> dict[int, dict]:
    """The training log lines of the run in ``out`` (``trainer_state.json``), by update."""
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry for entry in history if "loss" in entry}


def check_saved_encoder(folder: Path, model_type: str, auto_model: str) -> None:
    """The run in ``folder`` saved a ``model_type`` model that ``AutoModel`` loads as ``auto_model`` (remote code) and
    sentence-transformers as a sentence encoder (``modules.json``)."""
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == model_type and config["auto_map"]["AutoModel"] == auto_model
    assert (folder / "model.safetensors").exists() and (folder / "modules.json").exists()


def check_ddp_ranks(ranks: list[dict]) -> None:
    """The two ranks' records of a run under DDP (``launch_ddp``): each rank trained on its own micro-batches and the
    weights stayed identical across ranks."""
    assert ranks[0]["world_size"] == 2 and ranks[0]["checksum"] == ranks[1]["checksum"]
    assert ranks[0]["seen"] != ranks[1]["seen"]  # each rank its own micro-batches
