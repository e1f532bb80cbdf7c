"""LDT (Mao et al. 2021): the Lightweight Dual Transformer, a 2-layer encoder trained without a decoder; its presets
and its model card's section."""

from transformers import AutoModelForPreTraining

from hf_tlaser.models.family import FAIRSEQ_RECIPES, CardSection, Family, Presets

from .configuration_ldt import LDTConfig
from .modeling_ldt import LDTForAlignment, LDTModel

# LDT (Mao et al. 2021, sec. 4.1): batches of 128 pairs (max_sentences; max_tokens = 128 x the longest sentence
# never binds first), Adam at 1e-3 with betas (0.9, 0.999) and the authors' weight decay 1e-5, dropout 0.1 (config
# default). The authors warm up with pytorch_warmup's untuned linear warm-up (2 / (1 - beta2) = 2000 updates), hold
# the rate and divide it by 10 after 3 epochs: lr_schedule "step" (docs/training.md, "LDT: the learning-rate
# schedule"). tiny has cT-LASER tiny's data and token budget (8k BPE, <= 40 tokens, 4000 target tokens per update,
# one micro-batch, ~180 pairs: the in-batch negatives) on a d=256 encoder, the compute-lite member; small sits
# between.
SIZES = {
    "paper": {},
    "small": dict(hidden_size=384, num_attention_heads=6, intermediate_size=768),
    "tiny": dict(hidden_size=256, num_attention_heads=4, intermediate_size=512),
}
_ADAM = dict(learning_rate=1e-3, adam_betas=(0.9, 0.999), weight_decay=1e-5, lr_schedule="step", lr_step_epochs=3.0)
RECIPES = {
    "paper": dict(max_tokens=32000, update_tokens=32000, max_sentences=128, warmup_updates=2000, **_ADAM),
    "small": dict(
        vocab_size=32000,
        max_tokens=8000,
        update_tokens=8000,
        max_sentences=128,
        warmup_updates=1000,
        max_grad_norm=1.0,
        **_ADAM,
    ),
    "tiny": {**FAIRSEQ_RECIPES["tiny"], **_ADAM},
}
CITATION = (
    "Zhuoyuan Mao, Prakhar Gupta, Chenhui Chu, Martin Jaggi and Sadao Kurohashi: Lightweight Cross-Lingual Sentence "
    "Representation Learning (ACL 2021), the Lightweight Dual Transformer."
)


def summary(config: dict, name: str, dim: int, names: str) -> str:
    """The card's first paragraph."""
    return (
        f"An {name} multilingual sentence encoder (Mao et al. 2021, *Lightweight Cross-Lingual Sentence "
        f"Representation Learning*) trained with hf_tlaser: one {dim}-dim vector per sentence or document for "
        f"{names}."
    )


def card_rows(config: dict, dim: int) -> list[list[str]]:
    """The card's architecture, sentence vector and training objective."""
    weights = (config.get("generative_loss_weight"), config.get("align_loss_weight"), config.get("sim_loss_weight"))
    return [
        [
            "Architecture",
            f"post-LN transformer encoder shared by all languages, no decoder: {config['num_hidden_layers']} layers, "
            f"hidden size {config['hidden_size']}, {config['num_attention_heads']} heads, FFN "
            f"{config['intermediate_size']}",
        ],
        ["Sentence vector", f"{config['hidden_size']}-dim mean of the final hidden states (mean pooling)"],
        [
            "Training objective",
            f"eq. 7 of the paper with weights {weights}: the generative task {config.get('generative_task')!r} "
            "(UGT: single-word masked LM and cross-lingual token reconstruction, predicted from the sentence vector), "
            "in-batch sentence alignment (inner products) and sentence similarity losses",
        ],
    ]


FAMILY = Family(
    model_type="ldt",
    config_class=LDTConfig,
    model_class=LDTModel,
    head_class=LDTForAlignment,
    head_auto=AutoModelForPreTraining,
    exports=True,
    display_name=lambda config: "LDT",
    takes_backbone=True,
    teacher_head=True,
    presets=Presets(members={"ldt": {}}, sizes=SIZES, recipes=RECIPES),
    card=CardSection(
        ("multilingual", "ldt", "lightweight-dual-transformer"), summary, card_rows, CITATION, head="head"
    ),
)
