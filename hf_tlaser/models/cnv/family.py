"""cNV (Li & Mak): shared layers over a frozen bilingual NMT pair, each language through its own encoder; its presets
(the shared layers' and, in ``nmt``, the NMT pair's Marian sizes and recipe) and its model card's section."""

from hf_tlaser.models.family import CardSection, Family, Presets, constrained

from .configuration_cnv import CNVConfig
from .modeling_cnv import CNVModel

# cNV (Li & Mak, sec. 3): the shared layers (d_h 1024, r 4, N_s 20, beta 0.5, alpha 2 sqrt(d_h) = the config
# default) trained with Adam on batches of 80 sentence pairs (of at most 50 tokens) for 5 epochs over the frozen
# NMT pair; the NMT models: vocabulary 85,000, word embeddings 500, hidden size 1024, batches of 80, Adam. Their
# NMT models are attention RNNs; here they are Marian transformers, whose word embedding width is d_model (500,
# 10 heads of 50) and whose hidden layers are the 1024-wide feed-forward layers.
SIZES = {
    "paper": {},
    "small": dict(shared_hidden_size=512),
    "tiny": dict(shared_hidden_size=256, num_negatives=10),
}


def _marian(d_model: int, heads: int, ffn: int, layers: int) -> dict:
    """``MarianConfig`` kwargs of an NMT model: ``layers`` encoder and decoder layers of width ``d_model``."""
    return dict(
        d_model=d_model,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        encoder_layers=layers,
        decoder_layers=layers,
        dropout=0.1,
    )


_NMT_RECIPE = dict(weight_decay=0.0, max_grad_norm=1.0)
NMT = {
    "paper": dict(
        config_kwargs=_marian(500, 10, 1024, 6),
        recipe=dict(max_tokens=4000, update_tokens=4000, max_sentences=80, warmup_updates=4000, **_NMT_RECIPE),
        steps=100_000,
    ),
    "small": dict(
        config_kwargs=_marian(256, 4, 1024, 4),
        recipe=dict(max_tokens=4000, update_tokens=8000, learning_rate=1e-3, warmup_updates=1000, **_NMT_RECIPE),
        steps=10_000,
    ),
    # measured on 2 CPU cores (docs/training.md): ~0.9 s per update, cross entropy 9.3 -> 5.7 in 200 updates
    "tiny": dict(
        config_kwargs=_marian(256, 4, 1024, 3),
        recipe=dict(max_tokens=2000, update_tokens=2000, learning_rate=1e-3, warmup_updates=100, **_NMT_RECIPE),
        steps=200,
    ),
}
# stage 2: plain Adam (the paper's optimiser) on batches of at most 80 sentence pairs
_ADAM = dict(max_sentences=80, learning_rate=1e-3, adam_betas=(0.9, 0.999), weight_decay=0.0, max_grad_norm=1.0)
RECIPES = {
    "paper": dict(
        vocab_size=85000, max_tokens=4000, update_tokens=4000, warmup_updates=1000, max_sentence_tokens=50, **_ADAM
    ),
    "small": dict(
        vocab_size=32000, max_tokens=4000, update_tokens=4000, warmup_updates=500, max_sentence_tokens=50, **_ADAM
    ),
    "tiny": dict(
        vocab_size=8000,
        max_tokens=2000,
        update_tokens=2000,
        warmup_updates=50,
        max_sentence_tokens=40,
        max_lines=60000,
        **_ADAM,
    ),
}
CITATION = (
    "Wei Li and Brian Mak: cNV, cross-lingual document vectors from the shared layers of a pair of NMT models "
    "(NV, NTDV) trained with a distance constraint."
)


def display_name(config: dict) -> str:
    """cNV(y)_con / cNV(y)_sum (cNV_con / cNV_sum when the translation's vector is added, eq. 4 / 6; NV without the
    distance constraint)."""
    source = "" if config.get("combine_translation") else "(y)"
    return f"{'cNV' if constrained(config) else 'NV'}{source}_{config.get('sentence_vector', 'con')}"


def summary(config: dict, name: str, dim: int, names: str) -> str:
    """The card's first paragraph."""
    constraint = "with" if constrained(config) else "NV: without"
    frozen = "frozen " if config.get("freeze_nmt", True) else ""
    return (
        f"A {name} bilingual sentence encoder (Li & Mak, NMT-framework document vectors; {constraint} the "
        f"distance constraint) trained with hf_tlaser: shared layers over a pair of {frozen}NMT models give one "
        f"{dim}-dim vector per sentence or document for {names}, each language through its own encoder."
    )


def card_rows(config: dict, dim: int) -> list[list[str]]:
    """The card's rows but the parameter count: the NMT pair, the shared layers, the sentence vector, the training
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


FAMILY = Family(
    model_type="cnv",
    config_class=CNVConfig,
    model_class=CNVModel,
    display_name=display_name,
    vector_size=lambda config: CNVConfig.from_dict(config).embedding_size,
    per_language=True,
    presets=Presets(members={"cnv": {}}, sizes=SIZES, recipes=RECIPES, nmt=NMT, training="hf_tlaser.training.cnv"),
    card=CardSection(("cnv", "bilingual", "translation-encoders"), summary, card_rows, CITATION),
)
