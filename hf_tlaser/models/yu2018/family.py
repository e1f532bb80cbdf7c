"""Yu 2018 (Yu, Li & Oguz): an LSTM seq2seq with a similarity loss, translating both ways; its presets and its model
card's section."""

from transformers import AutoModelForSeq2SeqLM

from hf_tlaser.models.family import FAIRSEQ_RECIPES, CardSection, Family, Presets

from .configuration_yu2018 import Yu2018Config
from .modeling_yu2018 import Yu2018ForTranslation, Yu2018Model

# Yu 2018 (sec. 2): paper = its sizes (85k vocabulary, BiLSTM 512 + LSTM 1024, decoder 1024) and gradient clipping
# at 5; tiny is as wide as LASER's tiny (192-dim sentence vectors, 128-dim embeddings, decoder 384); alpha: see
# Yu2018Config.similarity_weight
SIZES = {
    "paper": {},
    "small": dict(embed_dim=256, encoder_hidden_size=256, hidden_size=512, decoder_hidden_size=1024),
    "tiny": dict(
        embed_dim=128, encoder_hidden_size=96, hidden_size=192, decoder_hidden_size=384, self_attention_dim=64
    ),
}
RECIPES = {  # gradient clipping at max norm 5 (sec. 2); the paper's 85k vocabulary
    "paper": {**FAIRSEQ_RECIPES["paper"], "vocab_size": 85000, "max_grad_norm": 5.0},
    "small": {**FAIRSEQ_RECIPES["small"], "max_grad_norm": 5.0},
    "tiny": {**FAIRSEQ_RECIPES["tiny"], "max_grad_norm": 5.0},
}
CITATION = """```bibtex
@inproceedings{yu-etal-2018-multilingual,
  title = "Multilingual Seq2seq Training with Similarity Loss for Cross-Lingual Document Classification",
  author = "Yu, Katherin and Li, Haoran and Oguz, Barlas",
  booktitle = "Proceedings of the Third Workshop on Representation Learning for NLP",
  year = "2018",
  pages = "175--179"
}
```"""


def summary(config: dict, name: str, dim: int, names: str) -> str:
    """The card's first paragraph."""
    return (
        f"A {name} multilingual sentence encoder (Yu, Li & Oguz 2018, *Multilingual seq2seq training with "
        f"similarity loss for cross-lingual document classification*) trained with hf_tlaser: one {dim}-dim "
        f"vector per sentence or document for {names}."
    )


def card_rows(config: dict, dim: int) -> list[list[str]]:
    """The card's architecture, sentence vector and training objective."""
    pooling = {"mean": "mean", "max": "max", "self_attention": "one-hop self-attention (Lin et al. 2017)"}
    objective = (
        "multilingual translation in both directions of each bilingual batch through an LSTM decoder without "
        "attention that sees only the sentence vector and the target-language token"
    )
    if float(config.get("similarity_weight") or 0) > 0:
        objective += f", plus the similarity loss ||h(s) - h(t)||^2 (alpha={config['similarity_weight']})"
    if float(config.get("encoder_l2_weight") or 0) > 0:
        objective += f", plus an L2 penalty on the encoder weights ({config['encoder_l2_weight']})"
    return [
        [
            "Architecture",
            f"LSTM encoder: a bidirectional layer of {config['encoder_hidden_size']} units per direction, then a "
            f"layer of {config['hidden_size']} units; {config['embed_dim']}-dim token embeddings",
        ],
        [
            "Sentence vector",
            f"{config['hidden_size']}-dim {pooling[config.get('pooling', 'mean')]} over the top encoder states",
        ],
        ["Training objective", objective],
    ]


FAMILY = Family(
    model_type="yu2018",
    config_class=Yu2018Config,
    model_class=Yu2018Model,
    head_class=Yu2018ForTranslation,
    head_auto=AutoModelForSeq2SeqLM,
    display_name=lambda config: "Yu 2018",
    language_table=True,
    translates_back=True,
    presets=Presets(members={"yu2018": {}}, sizes=SIZES, recipes=RECIPES),
    card=CardSection(("multilingual", "yu2018", "seq2seq-similarity-loss"), summary, card_rows, CITATION),
)
