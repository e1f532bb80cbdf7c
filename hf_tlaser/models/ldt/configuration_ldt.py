"""Lightweight Dual Transformer (LDT) configuration (Mao et al. 2021, sec. 3 and 4.1)."""

from __future__ import annotations

from transformers import PretrainedConfig

GENERATIVE_TASKS = ("ugt", "xtr", "smlm", "mlm", "mlm_xtr")
"""The generative tasks of Table 6: UGT (SMLM and XTR unified, eq. 2 with q of eq. 4), XTR alone (eq. 2-3), SMLM
alone (eq. 1), BERT-style MLM, and MLM plus XTR."""


class LDTConfig(PretrainedConfig):
    r"""Configuration of an LDT sentence encoder and its training losses. Defaults are the paper's (Table 1, sec. 4.1):
    one 2-layer transformer encoder shared by all languages, hidden size 512, 8 heads, filter size 1024, dropout 0.1,
    mean-pooled sentence vectors, loss weights (1, 2, 2) of eq. (7).

    Details the paper leaves open follow the authors' code (Mao-KU/lightweight-crosslingual-sent2vec) or, where
    that is unusual, the transformer literature it cites:

    * post-LN blocks (BERT, as the authors' code); token embeddings times sqrt(hidden_size) plus fixed sinusoidal
      positions (Vaswani et al. 2017, which the paper cites for the encoder; no position table to train, and inputs
      longer than the training sentences, such as 750-word documents, still get defined positions), then a
      LayerNorm and dropout (BERT's embedding block);
    * SMLM masks one token per pair, in a side drawn uniformly (authors' code); any text token may be masked, i.e.
      not STR_TAG, ``</s>``, padding or ``<unk>`` (the authors also skipped punctuation pieces, which needs the
      tokenizer inside the model);
    * the masked token becomes ``mask_token_id``: ``<unk>`` by default, a row the byte-fallback BPE never emits
      (the tokenizer has no mask token);
    * the XTR label distribution (eq. 3) is uniform over the distinct tokens of the translation (footnote 4:
      "all the N_wi set to 1"); ``xtr_label_counts`` weighs tokens by their count instead;
    * MLM (the Table 6 ablation) masks 15% of the text tokens (BERT, the authors' ``mlmrate``), all replaced by the
      mask token, and predicts them from their final hidden states.

    Args:
        vocab_size (`int`, 50000): joint BPE vocabulary (the paper: 50k SentencePiece per language pair).
        hidden_size (`int`, 512): encoder width d_h; also the sentence-vector size.
        num_hidden_layers (`int`, 2): encoder layers.
        num_attention_heads (`int`, 8): attention heads.
        intermediate_size (`int`, 1024): feed-forward ("filter") width d_fc.
        activation_function (`str`, "swish"): FFN and prediction-head activation (authors' code; any key of
            `transformers.activations.ACT2FN`).
        dropout (`float`, 0.1): dropout on the embeddings, the attention output and the FFN output.
        attention_dropout (`float`, 0.1): dropout on the attention probabilities (authors' code).
        max_position_embeddings (`int`, 2048): longest input (tokens incl. STR_TAG and `</s>`).
        layer_norm_eps (`float`, 1e-12): LayerNorm epsilon (BERT, authors' code).
        generative_task (`str`, "ugt"): one of GENERATIVE_TASKS (Table 6).
        mlm_probability (`float`, 0.15): share of text tokens masked by the "mlm" tasks.
        xtr_label_counts (`bool`, False): XTR labels N_wi / ||S|| with the token counts N_wi (eq. 3 with word
            frequencies) instead of uniform over the distinct tokens (footnote 4).
        generative_loss_weight (`float`, 1.0): weight of the generative loss in eq. (7).
        align_loss_weight (`float`, 2.0): weight of the sentence alignment loss (eq. 5) in eq. (7); 0 turns it off
            (Table 7 "UGT").
        sim_loss_weight (`float`, 2.0): weight of the sentence similarity loss (eq. 6) in eq. (7); 0 turns it off
            (Table 7 "UGT + align").
        languages (`list[str]`, ["de", "en", "es", "fr", "it"]): training languages (the encoder reads them all
            alike; the list only documents the model and lets the trainer check its pairs).
        pad_token_id, unk_token_id, eos_token_id, cls_token_id (`int`, 0/1/2/3): special ids of the shared tokenizer
            (``cls`` is STR_TAG); none of them is ever masked or counted in a label distribution.
        mask_token_id (`int`, None): id that replaces masked tokens; None means ``unk_token_id``.
        teacher_dim (`int`, None): width of a teacher's vectors (``hf-tlaser train --teacher``): a Linear head
            hidden_size -> teacher_dim is applied to every final hidden state before pooling, so ``encode``,
            ``last_hidden_state``, ``pooler_output`` and sentence-transformers give teacher_dim-wide vectors (the
            translation decoder / training losses read the unprojected ones). None: no head.
        backbone (`dict`, None): the nested config (``to_dict()``, with its ``model_type``) of a pretrained Hugging
            Face encoder that replaces the LDT layers (``hf-tlaser train --init-from``; its input embeddings are then
            the generative loss's output matrix). None: the paper's encoder, sized by the fields above.
        pooling (`str`, "mean"): the sentence vector: "mean" (sec. 3.1) over the non-pad positions, or "cls" (the
            final output at position 0).
        sentence_modules (`list[dict]`, None): the sentence-transformers modules after pooling that a backbone
            carried (Dense, Normalize; see ``TLaserConfig``), applied in order to the pooled vector, which the
            losses then read. A Dense must keep ``hidden_size`` (the prediction head reads both the token states and
            the sentence vector). Not with ``teacher_dim``.
        prompt (`str`, None): the prompt that the saved tokenizer's template adds to every text; passing it again
            is warned about.
        prompt_ids (`list[int]`, None): the prompt's pieces, as the template adds them after ``<s>``.
    """

    model_type = "ldt"

    def __init__(
        self,
        vocab_size: int = 50000,
        hidden_size: int = 512,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 8,
        intermediate_size: int = 1024,
        activation_function: str = "swish",
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        max_position_embeddings: int = 2048,
        layer_norm_eps: float = 1e-12,
        generative_task: str = "ugt",
        mlm_probability: float = 0.15,
        xtr_label_counts: bool = False,
        generative_loss_weight: float = 1.0,
        align_loss_weight: float = 2.0,
        sim_loss_weight: float = 2.0,
        languages: list[str] | tuple[str, ...] = ("de", "en", "es", "fr", "it"),
        pad_token_id: int = 0,
        unk_token_id: int = 1,
        eos_token_id: int = 2,
        cls_token_id: int = 3,
        mask_token_id: int | None = None,
        teacher_dim: int | None = None,
        backbone: dict | PretrainedConfig | None = None,
        pooling: str = "mean",
        sentence_modules: list[dict] | None = None,
        prompt: str | None = None,
        prompt_ids: list[int] | None = None,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.teacher_dim = teacher_dim
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.activation_function = activation_function
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_position_embeddings = max_position_embeddings
        self.layer_norm_eps = layer_norm_eps
        self.generative_task = generative_task
        self.mlm_probability = mlm_probability
        self.xtr_label_counts = xtr_label_counts
        self.generative_loss_weight = generative_loss_weight
        self.align_loss_weight = align_loss_weight
        self.sim_loss_weight = sim_loss_weight
        self.languages = list(languages)
        self.unk_token_id = unk_token_id
        self.cls_token_id = cls_token_id
        self.mask_token_id = mask_token_id
        self.backbone = backbone.to_dict() if isinstance(backbone, PretrainedConfig) else backbone
        self.pooling = pooling
        self.sentence_modules = list(sentence_modules) if sentence_modules else None
        self.prompt = prompt
        self.prompt_ids = list(prompt_ids) if prompt_ids else None
        super().__init__(pad_token_id=pad_token_id, eos_token_id=eos_token_id, **kwargs)
        self._validate()

    def _validate(self) -> None:
        if self.num_attention_heads <= 0 or self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"LDTConfig: hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                f"{self.num_attention_heads}"
            )
        if self.generative_task not in GENERATIVE_TASKS:
            raise ValueError(f"LDTConfig: generative_task={self.generative_task!r}; expected one of {GENERATIVE_TASKS}")
        if not 0.0 < self.mlm_probability <= 1.0:
            raise ValueError(f"LDTConfig: mlm_probability={self.mlm_probability} must be in (0, 1]")
        weights = (self.generative_loss_weight, self.align_loss_weight, self.sim_loss_weight)
        if min(weights) < 0 or max(weights) == 0:
            raise ValueError(f"LDTConfig: loss weights {weights} (eq. 7) must be >= 0 and not all 0")
        if not self.languages or len(set(self.languages)) != len(self.languages):
            raise ValueError(f"LDTConfig: languages={self.languages} must be a non-empty list without repeats")
        if self.pooling not in ("cls", "mean"):
            raise ValueError(f"LDTConfig: pooling={self.pooling!r}; expected cls or mean")
        if self.backbone is not None and self.backbone.get("hidden_size", self.hidden_size) != self.hidden_size:
            raise ValueError(f"LDTConfig: hidden_size={self.hidden_size} differs from the backbone's")
        if self.sentence_modules and self.teacher_dim is not None:
            raise ValueError(
                "LDTConfig: teacher_dim (a head before pooling) and the backbone's sentence_modules (Dense / "
                "Normalize after pooling) cannot both shape the sentence vector; distil from a teacher of the "
                "vector's width"
            )
        widths = [m["out_features"] for m in self.sentence_modules or () if m.get("type") == "Dense"]
        if any(width != self.hidden_size for width in widths):
            raise ValueError(
                f"LDTConfig: the backbone's Dense modules give widths {widths}; LDT's prediction head reads "
                f"hidden_size={self.hidden_size} (use --model tlaser or ctlaser)"
            )
        if self.max_position_embeddings < 3:
            raise ValueError("LDTConfig: max_position_embeddings must leave room for STR_TAG, a token and </s>")

    @property
    def masking_token_id(self) -> int:
        """The id that replaces masked tokens: ``mask_token_id``, else ``unk_token_id``."""
        return self.unk_token_id if self.mask_token_id is None else self.mask_token_id


LDTConfig.register_for_auto_class()
