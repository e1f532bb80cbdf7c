"""Each family's part of its model card (``CARD_SECTIONS``, by ``model_type``): its Hub tags, summary, rows of the
details table and citation, as data and pure functions of the config dict. ``model_card`` adds what every card
shares. LASER, the T-LASER paper's baseline, takes T-LASER's summary, objective and citation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hf_tlaser.models.registry import constrained


def paper_summary(paper: str, article: str = "A") -> Callable[[dict, str, int, str], str]:
    """The first paragraph of a card of a family that ``paper`` (its authors, year and title) describes: one vector
    per sentence or document for the card's languages."""

    def summary(config: dict, name: str, dim: int, names: str) -> str:
        return (
            f"{article} {name} multilingual sentence encoder ({paper}) trained with hf_tlaser: one {dim}-dim vector "
            f"per sentence or document for {names}."
        )

    return summary


@dataclass(frozen=True)
class CardSection:
    """A family's part of its model card.

    Attributes:
        tags: its Hub tags (after ``feature-extraction`` and ``sentence-similarity``, and ``sentence-transformers``
            for a folder with that layout).
        summary: the card's first paragraph from the config dict, the model's name, the sentence vector's width and
            the languages' names.
        rows: its rows of the details table from the config dict and the sentence vector's width: the architecture,
            the sentence vector and the training objective (a family with one encoder per language: every row but
            the parameter count).
        citation: what to cite (markdown).
        head: what the checkpoint holds besides the encoder, in the parameter count of a family with one encoder.
    """

    tags: tuple[str, ...]
    summary: Callable[[dict, str, int, str], str]
    rows: Callable[[dict, int], list[list[str]]]
    citation: str
    head: str = "decoder"


TLASER_CITATION = """```bibtex
@inproceedings{li-mak-2020-transformer,
  title = "Transformer based Multilingual document Embedding model",
  author = "Li, Wei and Mak, Brian",
  year = "2020",
  eprint = "2008.08567",
  archivePrefix = "arXiv"
}
```"""


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


def translation_rows(architecture: Callable[[dict], str], vector: str) -> Callable[[dict, int], list[list[str]]]:
    """The details rows of a family trained by translation (T-LASER's and LASER's): its ``architecture`` from the
    config dict, its sentence ``vector`` (``{dim}``: the width) and ``translation_objective``."""

    def rows(config: dict, dim: int) -> list[list[str]]:
        return [
            ["Architecture", architecture({**config, "dim": dim})],
            ["Sentence vector", vector.format(dim=dim)],
            ["Training objective", translation_objective(config)],
        ]

    return rows


TLASER_ROWS = translation_rows(
    lambda config: (
        f"pre-LN transformer encoder: {config['num_hidden_layers']} layers, hidden size {config['dim']}, "
        f"{config['num_attention_heads']} heads, FFN {config['intermediate_size']}"
    ),
    "{dim}-dim final encoder output at the STR_TAG position (CLS pooling)",
)
LASER_ROWS = translation_rows(
    lambda config: (
        f"BiLSTM encoder: {config.get('num_layers', 1)} layer(s), {config['lstm_hidden_size']} units per "
        f"direction, {config.get('embed_dim')}-dim token embeddings"
    ),
    "{dim}-dim max over the BiLSTM outputs of all tokens (max pooling)",
)


CNV_CITATION = (
    "Wei Li and Brian Mak: cNV, cross-lingual document vectors from the shared layers of a pair of NMT models "
    "(NV, NTDV) trained with a distance constraint."
)


def cnv_summary(config: dict, name: str, dim: int, names: str) -> str:
    """cNV's first paragraph."""
    constraint = "with" if constrained(config) else "NV: without"
    frozen = "frozen " if config.get("freeze_nmt", True) else ""
    return (
        f"A {name} bilingual sentence encoder (Li & Mak, NMT-framework document vectors; {constraint} the "
        f"distance constraint) trained with hf_tlaser: shared layers over a pair of {frozen}NMT models give one "
        f"{dim}-dim vector per sentence or document for {names}, each language through its own encoder."
    )


def cnv_rows(config: dict, dim: int) -> list[list[str]]:
    """cNV's rows but the parameter count: the NMT pair, the shared layers, the sentence vector, the training
    objective, the longest input and the languages."""
    a, b = config["languages"]
    nmt = {a: config.get("nmt_a_to_b") or {}, b: config.get("nmt_b_to_a") or {}}
    heads, hidden, vector = config.get("num_summary_heads"), config.get("shared_hidden_size"), config["sentence_vector"]
    gru = "bidirectional" if config.get("gru_bidirectional") else "unidirectional"
    beta = float(config.get("distance_beta") or 0)
    objective = "both translation losses through the shared layers"
    if beta > 0:
        objective = (
            f"(1 - beta) x {objective} + beta x the cNV distance cost (eq. 7-9; beta={beta}, "
            f"alpha={config.get('distance_alpha') or '2 sqrt(d_h)'}, {config.get('num_negatives')} in-batch negatives)"
        )
    else:
        objective += " (NV: no distance constraint)"
    if config.get("freeze_nmt", True):
        objective += "; the NMT parameters stay fixed"

    def nmt_model(src: str, tgt: str) -> str:
        c = nmt[src]
        return (
            f"{src}->{tgt}: {c.get('model_type')}, {c.get('encoder_layers')} encoder + {c.get('decoder_layers')} "
            f"decoder layers, width {c.get('d_model')}, {c.get('vocab_size')}-token vocabulary"
        )

    return [
        ["NMT pair", f"{nmt_model(a, b)}; {nmt_model(b, a)}"],
        [
            "Shared layers",
            f"a {gru} GRU ({hidden} units) and a {heads}-head self-attentive summary between each NMT encoder and "
            "its decoder",
        ],
        [
            "Sentence vector",
            f"cNV_{vector}: the {heads} context vectors {'concatenated' if vector == 'con' else 'summed'}, "
            f"{dim} dimensions, from the encoder of the text's own language (no translation)",
        ],
        ["Training objective", objective],
        ["Maximum input length", f"{nmt[a].get('max_position_embeddings')} tokens (the NMT encoders' positions)"],
        ["Languages", f"{a}, {b}"],
    ]


YU2018_CITATION = """```bibtex
@inproceedings{yu-etal-2018-multilingual,
  title = "Multilingual Seq2seq Training with Similarity Loss for Cross-Lingual Document Classification",
  author = "Yu, Katherin and Li, Haoran and Oguz, Barlas",
  booktitle = "Proceedings of the Third Workshop on Representation Learning for NLP",
  year = "2018",
  pages = "175--179"
}
```"""


def yu2018_rows(config: dict, dim: int) -> list[list[str]]:
    """Yu 2018's architecture, sentence vector and training objective."""
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


LDT_CITATION = (
    "Zhuoyuan Mao, Prakhar Gupta, Chenhui Chu, Martin Jaggi and Sadao Kurohashi: Lightweight Cross-Lingual Sentence "
    "Representation Learning (ACL 2021), the Lightweight Dual Transformer."
)


def ldt_rows(config: dict, dim: int) -> list[list[str]]:
    """LDT's architecture, sentence vector and training objective."""
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


TLASER_SUMMARY = paper_summary("Li & Mak 2020, *Transformer based Multilingual document Embedding model*")
"""T-LASER's and LASER's first paragraph."""
YU2018_SUMMARY = paper_summary(
    "Yu, Li & Oguz 2018, *Multilingual seq2seq training with similarity loss for cross-lingual document classification*"
)
LDT_SUMMARY = paper_summary("Mao et al. 2021, *Lightweight Cross-Lingual Sentence Representation Learning*", "An")

CARD_SECTIONS: dict[str, CardSection] = {
    "tlaser": CardSection(("t-laser", "multilingual"), TLASER_SUMMARY, TLASER_ROWS, TLASER_CITATION),
    "laser": CardSection(("t-laser", "multilingual", "laser"), TLASER_SUMMARY, LASER_ROWS, TLASER_CITATION),
    "cnv": CardSection(("cnv", "bilingual", "translation-encoders"), cnv_summary, cnv_rows, CNV_CITATION),
    "yu2018": CardSection(
        ("multilingual", "yu2018", "seq2seq-similarity-loss"), YU2018_SUMMARY, yu2018_rows, YU2018_CITATION
    ),
    "ldt": CardSection(
        ("multilingual", "ldt", "lightweight-dual-transformer"), LDT_SUMMARY, ldt_rows, LDT_CITATION, head="head"
    ),
}
"""``model_type`` -> its card section, in the order of ``hf_tlaser.models.registry.FAMILIES``."""
