"""Configuration of cNV (Li & Mak, "constrained NMT-framework-based document vectors"): two frozen bilingual NMT
models a->b and b->a, and the shared layers inserted between each encoder and its decoder."""

from __future__ import annotations

import math

from transformers import PretrainedConfig

SENTENCE_VECTORS = ("con", "sum")


class CNVConfig(PretrainedConfig):
    """Hyperparameters of a cNV model; defaults are the paper's (sec. 3).

    Args:
        languages: ``[a, b]``; the a->b NMT model reads language a, the b->a model reads b.
        nmt_a_to_b, nmt_b_to_a: the two Hugging Face seq2seq configs (``config.to_dict()``, with their
            ``model_type``, e.g. ``"marian"``). Their encoders must have one width, and so must their decoders.
        shared_hidden_size: d_h, the hidden size of the shared GRU and of each attention head (paper 1024).
        gru_bidirectional: run the shared GRU in both directions (d_h / 2 per direction). The paper names "a shared
            GRU layer" without a direction; one direction is the default.
        num_summary_heads: r, the heads of the self-attentive summary (eq. 1-2); paper 4.
        sentence_vector: ``"con"`` (eq. 5: the r context vectors concatenated, r x d_h) or ``"sum"`` (eq. 3: their
            sum, d_h). The paper's best variant without a translator is cNV(y)_con, the default.
        combine_translation: also translate each input with its own (frozen) NMT model and add the vector of the
            translation, read by the other language's encoder: cNV_sum / cNV_con of eq. 4 / 6 (the paper's best
            scores, at the cost of decoding). False (default) is cNV(y) of Fig. 1c: no translator at test time.
        distance_beta: beta of eq. 9, the weight of the distance cost against (1 - beta) x the two translation
            losses; paper 0.5. 0 gives NV (no distance constraint).
        distance_alpha: the margin alpha of eq. 7; None is the paper's 2 sqrt(d_h).
        num_negatives: N_s, in-batch negatives per pair (eq. 9); paper 20.
        distance_squared: False (default): eq. 7-8 on plain Frobenius norms ``|P(a) - P(b)|``, the reading under
            which the hinge is scale-free (k and v_norm both grow linearly with ||P||). True: squared norms, as the
            text writes ``|P(a) - P(b)|^2``; then k grows with ||P||^2 and v_norm with ||P||, so the shared layers
            can switch the hinge off by inflating ||P|| without aligning anything (docs/training.md, "cNV: plain
            or squared distances").
        label_smoothing: of the two translation cross entropies (0: plain cross entropy, as the paper).
        shared_dropout: dropout on the GRU states before the summary (the paper gives none).
        freeze_nmt: keep the NMT parameters fixed (the paper); False fine-tunes them too.
    """

    model_type = "cnv"

    def __init__(
        self,
        languages: list[str] | tuple[str, str] = ("en", "de"),
        nmt_a_to_b: dict | None = None,
        nmt_b_to_a: dict | None = None,
        shared_hidden_size: int = 1024,
        gru_bidirectional: bool = False,
        num_summary_heads: int = 4,
        sentence_vector: str = "con",
        combine_translation: bool = False,
        distance_beta: float = 0.5,
        distance_alpha: float | None = None,
        num_negatives: int = 20,
        distance_squared: bool = False,
        label_smoothing: float = 0.0,
        shared_dropout: float = 0.0,
        freeze_nmt: bool = True,
        **kwargs,
    ) -> None:
        languages = list(languages)
        if len(languages) != 2 or languages[0] == languages[1]:
            raise ValueError(f"languages={languages}: a cNV model joins exactly two different languages")
        if sentence_vector not in SENTENCE_VECTORS:
            raise ValueError(f"sentence_vector={sentence_vector!r}; expected one of {SENTENCE_VECTORS}")
        if not 0.0 <= distance_beta <= 1.0:
            raise ValueError(f"distance_beta={distance_beta}: eq. 9 needs 0 <= beta <= 1")
        if gru_bidirectional and shared_hidden_size % 2:
            raise ValueError(f"shared_hidden_size={shared_hidden_size} must be even for a bidirectional GRU")
        self.languages = languages
        self.nmt_a_to_b = nmt_a_to_b
        self.nmt_b_to_a = nmt_b_to_a
        self.shared_hidden_size = shared_hidden_size
        self.gru_bidirectional = gru_bidirectional
        self.num_summary_heads = num_summary_heads
        self.sentence_vector = sentence_vector
        self.combine_translation = combine_translation
        self.distance_beta = distance_beta
        self.distance_alpha = distance_alpha
        self.num_negatives = num_negatives
        self.distance_squared = distance_squared
        self.label_smoothing = label_smoothing
        self.shared_dropout = shared_dropout
        self.freeze_nmt = freeze_nmt
        super().__init__(**kwargs)

    @property
    def alpha(self) -> float:
        """The margin of eq. 7: ``distance_alpha``, or the paper's 2 sqrt(d_h)."""
        return 2 * math.sqrt(self.shared_hidden_size) if self.distance_alpha is None else self.distance_alpha

    @property
    def embedding_size(self) -> int:
        """Width of the sentence vector: r x d_h for ``"con"`` (eq. 5), d_h for ``"sum"`` (eq. 3)."""
        return self.shared_hidden_size * (self.num_summary_heads if self.sentence_vector == "con" else 1)


CNVConfig.register_for_auto_class()
