"""T-LASER / cT-LASER (Li & Mak 2020): a transformer encoder, CLS pooling, a translation decoder; its presets and its
model card's section (which LASER, the paper's baseline, shares)."""

from transformers import AutoModelForSeq2SeqLM

from hf_tlaser.models.family import CONSTRAINED, FAIRSEQ_RECIPES, PLAIN, CardSection, Family, Presets, constrained

from .configuration_tlaser import TLaserConfig
from .modeling_tlaser import TLaserForTranslation, TLaserModel

SIZES = {
    "paper": {},
    "small": dict(
        hidden_size=512,
        num_hidden_layers=6,
        num_attention_heads=8,
        intermediate_size=2048,
        decoder_attention_heads=8,
        decoder_ffn_dim=2048,
        dropout=0.1,
        init_style="fairseq",  # at d=512 N(0, 0.02) is 2.2x below xavier scale
    ),
    # measured on 2 CPU cores (docs/learning_curves.md): as wide as a few minutes allow; fairseq's scale-aware init
    # (N(0, 0.02) left the position-0 vectors collapsed); the alignment loss is on because translation alone left
    # the sentence vectors collapsed (mean cosine ~0.97) at this budget; no dropout: these runs stay below one epoch
    # (0.69 after the main job's 800 updates), and dropout 0.1 cost 6.5 NTREX points and 3.6 SIB-200 cross points
    # at 100k pairs seen (and ~10 % of the update time)
    "tiny": dict(
        init_style="fairseq",
        hidden_size=192,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=768,
        decoder_attention_heads=4,
        decoder_ffn_dim=768,
        dropout=0.0,
        align_loss_weight=1.0,
    ),
}
CITATION = """```bibtex
@inproceedings{li-mak-2020-transformer,
  title = "Transformer based Multilingual document Embedding model",
  author = "Li, Wei and Mak, Brian",
  year = "2020",
  eprint = "2008.08567",
  archivePrefix = "arXiv"
}
```"""


def summary(config: dict, name: str, dim: int, names: str) -> str:
    """The card's first paragraph (T-LASER's and LASER's)."""
    return (
        f"A {name} multilingual sentence encoder (Li & Mak 2020, *Transformer based Multilingual document "
        f"Embedding model*) trained with hf_tlaser: one {dim}-dim vector per sentence or document for {names}."
    )


def translation_objective(config: dict) -> str:
    """The training objective of T-LASER and LASER: translation through the sentence vector, with the distance
    constraint and the alignment loss where the config has them."""
    beta = float(config.get("distance_beta") or 0)
    objective = "multilingual translation through a decoder that sees only the sentence vector"
    if beta > 0:
        objective += f", plus the cT-LASER distance constraint (beta={beta}, alpha={config.get('distance_alpha')})"
    align = float(config.get("align_loss_weight") or 0)
    if align > 0:
        objective += f", plus an in-batch contrastive alignment loss (weight {align}, per pair"
        if float(config.get("align_margin") or 0) > 0:
            objective += f", additive margin {config['align_margin']}"
        if int(config.get("negative_memory_size") or 0) > 0:
            objective += f", with {config['negative_memory_size']} negatives of earlier batches kept in a memory"
            if config.get("negative_memory_same_language"):
                objective += " (each direction: those in the language it must find)"
        objective += ")"
    return objective


def card_rows(config: dict, dim: int) -> list[list[str]]:
    """The card's architecture, sentence vector and training objective."""
    architecture = (
        f"pre-LN transformer encoder: {config['num_hidden_layers']} layers, hidden size {dim}, "
        f"{config['num_attention_heads']} heads, FFN {config['intermediate_size']}"
    )
    return [
        ["Architecture", architecture],
        ["Sentence vector", f"{dim}-dim final encoder output at the STR_TAG position (CLS pooling)"],
        ["Training objective", translation_objective(config)],
    ]


FAMILY = Family(
    model_type="tlaser",
    config_class=TLaserConfig,
    model_class=TLaserModel,
    head_class=TLaserForTranslation,
    head_auto=AutoModelForSeq2SeqLM,
    exports=True,
    display_name=lambda config: "cT-LASER" if constrained(config) else "T-LASER",
    decoder_vocab=True,
    takes_backbone=True,
    language_table=True,
    multiway=True,
    teacher_head=True,
    presets=Presets(members={"tlaser": PLAIN, "ctlaser": CONSTRAINED}, sizes=SIZES, recipes=FAIRSEQ_RECIPES),
    card=CardSection(("t-laser", "multilingual"), summary, card_rows, CITATION),
)
