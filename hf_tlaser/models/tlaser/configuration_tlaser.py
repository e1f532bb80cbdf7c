"""T-LASER configuration (Li & Mak 2020, Table 1 and footnote 6)."""

from __future__ import annotations

from transformers import PretrainedConfig

DECODER_LANG_MODES = ("memory", "input")
DISTANCES = ("l2", "squared_l2")
POOLINGS = ("cls", "mean")
INIT_STYLES = ("bert", "fairseq")


class TLaserConfig(PretrainedConfig):
    r"""Configuration of a T-LASER / cT-LASER model. Defaults are the paper's (Table 1, footnote 6) and the
    authors' fairseq code.

    Args:
        vocab_size (`int`, 50000): size of the joint BPE vocabulary.
        hidden_size (`int`, 1024): encoder width d_h; also the sentence-embedding size.
        num_hidden_layers (`int`, 6): encoder layers.
        num_attention_heads (`int`, 16): encoder attention heads r.
        intermediate_size (`int`, 4096): encoder FFN width d_fc.
        activation_function (`str`, "relu"): FFN activation (any key of `transformers.activations.ACT2FN`).
        dropout (`float`, 0.3): dropout on embeddings, attention outputs and FFN outputs.
        attention_dropout (`float`, 0.0): dropout on attention probabilities.
        activation_dropout (`float`, 0.0): dropout after the FFN activation.
        max_position_embeddings (`int`, 2048): longest input (tokens incl. STR_TAG and `</s>`); a 750-word
            document must fit.
        scale_embedding (`bool`, True): multiply token embeddings by sqrt(hidden_size).
        layer_norm_eps (`float`, 1e-5): LayerNorm epsilon (pre-LN blocks plus a final LayerNorm).
        init_style (`str`, "bert"): weight initialisation. "bert" (the authors' script, ``--init-mod BERT``): every
            linear and embedding weight N(0, initializer_range), which is close to fairseq's scale at d=1024 but
            2.5-3.6x too small for narrow models. "fairseq" (fairseq's transformer): xavier-uniform linears with gain
            1/sqrt(2) on the self-attention q/k/v projections, embeddings and the output projection N(0, d^-0.5);
            scale-aware, and what the small presets use.
        initializer_range (`float`, 0.02): std of the "bert" initialisation.
        decoder_layers (`int`, 1): decoder layers (the paper uses one).
        decoder_attention_heads (`int`, 16): decoder attention heads.
        decoder_ffn_dim (`int`, 4096): decoder FFN width.
        languages (`list[str]`, ["de", "en", "es", "fr", "it"]): languages the decoder can be asked to produce;
            `tgt_lang` indexes this list.
        lang_embed_dim (`int`, 32): size of the target-language embedding E_l.
        decoder_lang_mode (`str`, "memory"): where E_l enters the decoder. "memory" (authors' code): the single
            key/value of the cross-attention is concat(sentence vector, E_l). "input" (paper eq. 3): E_l is
            concatenated to every target token embedding and projected back to hidden_size.
        label_smoothing (`float`, 0.1): label smoothing of the translation cross entropy.
        distance_beta (`float`, 0.25): weight beta of the parallel-pair distance d_p (eq. 10). 0 disables the
            distance-constraint loss (plain T-LASER); it is only computed when the batch carries target sentences.
        distance_lambda (`float`, None): weight lambda of the hinge terms (eq. 10); None means beta / 2.
        distance_alpha (`float`, 0.5): hinge margin alpha (eq. 9).
        distance_negatives (`int`, 20): in-batch negatives N_s per sentence and direction.
        distance (`str`, "l2"): "l2" (authors' code: plain L2 norm) or "squared_l2" (paper eq. 7-8).
        distance_vnorm_grad (`bool`, True): let gradients flow through v_norm as the authors' code does. False
            detaches it, which removes the incentive to inflate v_norm by moving all vectors together.
        distance_eps (`float`, 1e-6): epsilon of the v_norm normalisation (eq. 7-8).
        distance_mt_weight (`float`, 0.5): weight of the translation loss when the distance loss is on (eq. 10).
        align_loss_weight (`float`, 0.0): weight of an optional in-batch contrastive alignment loss (InfoNCE over
            the pairs' sentence vectors, Lightweight Dual Transformer eq. 5), averaged per pair and added to the
            per-token translation loss. 0 disables it.
        align_scale (`float`, 20.0): inverse temperature of the alignment loss on cosine similarities.
        align_margin (`float`, 0.0): additive margin of the alignment loss (LaBSE, Feng et al. 2022: 0.3): the
            positive pair's cosine minus the margin before scaling, in both directions. 0: the plain softmax.
        negative_memory_size (`int`, 0): a cross-batch memory (XBM, Wang et al. 2020) of the unit sentence vectors
            of the last N encoded rows of earlier micro-batches, extra negatives of the alignment loss (no gradient
            through them; an entry whose text or pair target is a sentence of the pair's group is left out). Needs
            ``align_loss_weight`` > 0. 0: in-batch negatives only.
        negative_memory_same_language (`bool`, False): each direction of a pair keeps only the memory's entries in
            the language of the sentence it must find (a -> b: those in b's language; b -> a: those in a's), as in
            retrieval, where a query meets candidates of one language. False: every entry of the memory. Needs
            ``negative_memory_size`` > 0.
        tie_word_embeddings (`bool`, False): tie the decoder's input embedding and output projection (the paper's
            246M parameter count implies untied).
        teacher_dim (`int`, None): width of a teacher's vectors (``hf-tlaser train --teacher``): a Linear head
            hidden_size -> teacher_dim is applied to every final hidden state before pooling, so ``encode``,
            ``last_hidden_state``, ``pooler_output`` and sentence-transformers give teacher_dim-wide vectors (the
            translation decoder / training losses read the unprojected ones). None: no head.
        backbone (`dict`, None): the nested config (``to_dict()``, with its ``model_type``) of a pretrained Hugging
            Face encoder that replaces the T-LASER encoder layers (``hf-tlaser train --init-from``), as
            ``EncoderDecoderConfig`` nests its encoder's. Its ``hidden_size`` is the model's. None: the paper's
            encoder, sized by the fields above.
        pooling (`str`, "cls"): the sentence vector. "cls" (the paper): the final output at position 0 (STR_TAG;
            a backbone's ``<s>``); "mean": the mean of the final outputs over the non-pad positions (special tokens
            included, as sentence-transformers' mean pooling).
        decoder_vocab_size (`int`, None): rows of the decoder's input embeddings and output layer when its
            vocabulary is restricted to the pieces of the training targets (``decoder_vocab_ids``, a saved buffer,
            maps them to tokenizer ids; the special tokens keep their ids). None: the whole vocabulary.
        tie_decoder_to_encoder (`bool`, False): the decoder reads and scores its tokens with the encoder's input
            embeddings (the backbone's, its ``decoder_vocab_ids`` rows when restricted) instead of its own tables.
        sampled_softmax (`int`, 0): in training, score only the rows of the batch's target tokens and this many
            rows drawn uniformly, instead of the whole decoder vocabulary (evaluation and ``generate`` score all).
            0: the full softmax.
        sentence_modules (`list[dict]`, None): the sentence-transformers modules after pooling that a backbone
            carried (``--init-from`` a sentence-transformers folder such as LaBSE's): ``{"type": "Dense",
            "in_features", "out_features", "bias", "activation_function"}`` (a ``torch.nn`` class path) or
            ``{"type": "Normalize"}``, applied in order to the pooled vector, so ``pooler_output``, ``encode`` and
            the saved sentence-transformers layout give the backbone's sentence vector. The decoder reads that final
            vector: its width is the last Dense's output. Not with ``teacher_dim``.
        prompt (`str`, None): the prompt that the saved tokenizer's template adds to every text (a
            sentence-transformers backbone's, e.g. e5's ``"query: "``); passing it again is warned about.
        prompt_ids (`list[int]`, None): the prompt's pieces, as the template adds them after ``<s>``.
    """

    model_type = "tlaser"

    def __init__(
        self,
        vocab_size: int = 50000,
        hidden_size: int = 1024,
        num_hidden_layers: int = 6,
        num_attention_heads: int = 16,
        intermediate_size: int = 4096,
        activation_function: str = "relu",
        dropout: float = 0.3,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        max_position_embeddings: int = 2048,
        scale_embedding: bool = True,
        layer_norm_eps: float = 1e-5,
        init_style: str = "bert",
        initializer_range: float = 0.02,
        decoder_layers: int = 1,
        decoder_attention_heads: int = 16,
        decoder_ffn_dim: int = 4096,
        languages: list[str] | tuple[str, ...] = ("de", "en", "es", "fr", "it"),
        lang_embed_dim: int = 32,
        decoder_lang_mode: str = "memory",
        label_smoothing: float = 0.1,
        distance_beta: float = 0.25,
        distance_lambda: float | None = None,
        distance_alpha: float = 0.5,
        distance_negatives: int = 20,
        distance: str = "l2",
        distance_vnorm_grad: bool = True,
        distance_eps: float = 1e-6,
        distance_mt_weight: float = 0.5,
        align_loss_weight: float = 0.0,
        align_scale: float = 20.0,
        align_margin: float = 0.0,
        negative_memory_size: int = 0,
        negative_memory_same_language: bool = False,
        pad_token_id: int = 0,
        unk_token_id: int = 1,
        eos_token_id: int = 2,
        cls_token_id: int = 3,
        decoder_start_token_id: int = 2,
        tie_word_embeddings: bool = False,
        teacher_dim: int | None = None,
        backbone: dict | PretrainedConfig | None = None,
        pooling: str = "cls",
        decoder_vocab_size: int | None = None,
        tie_decoder_to_encoder: bool = False,
        sampled_softmax: int = 0,
        sentence_modules: list[dict] | None = None,
        prompt: str | None = None,
        prompt_ids: list[int] | None = None,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.activation_function = activation_function
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.max_position_embeddings = max_position_embeddings
        self.scale_embedding = scale_embedding
        self.layer_norm_eps = layer_norm_eps
        self.init_style = init_style
        self.initializer_range = initializer_range
        self.decoder_layers = decoder_layers
        self.decoder_attention_heads = decoder_attention_heads
        self.decoder_ffn_dim = decoder_ffn_dim
        self.languages = list(languages)
        self.lang_embed_dim = lang_embed_dim
        self.decoder_lang_mode = decoder_lang_mode
        self.label_smoothing = label_smoothing
        self.distance_beta = distance_beta
        self.distance_lambda = distance_lambda
        self.distance_alpha = distance_alpha
        self.distance_negatives = distance_negatives
        self.distance = distance
        self.distance_vnorm_grad = distance_vnorm_grad
        self.distance_eps = distance_eps
        self.distance_mt_weight = distance_mt_weight
        self.align_loss_weight = align_loss_weight
        self.align_scale = align_scale
        self.align_margin = align_margin
        self.negative_memory_size = negative_memory_size
        self.negative_memory_same_language = negative_memory_same_language
        self.unk_token_id = unk_token_id
        self.cls_token_id = cls_token_id
        self.teacher_dim = teacher_dim
        self.backbone = backbone.to_dict() if isinstance(backbone, PretrainedConfig) else backbone
        self.pooling = pooling
        self.decoder_vocab_size = decoder_vocab_size
        self.tie_decoder_to_encoder = tie_decoder_to_encoder
        self.sampled_softmax = sampled_softmax
        self.sentence_modules = list(sentence_modules) if sentence_modules else None
        self.prompt = prompt
        self.prompt_ids = list(prompt_ids) if prompt_ids else None
        super().__init__(
            decoder_start_token_id=decoder_start_token_id,  # transformers 4.x's PretrainedConfig sets it
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self._validate()

    def _validate(self) -> None:
        for name, width, heads in (
            ("hidden_size", self.hidden_size, self.num_attention_heads),
            ("hidden_size (decoder)", self.hidden_size, self.decoder_attention_heads),
        ):
            if heads <= 0 or width % heads:
                raise ValueError(f"TLaserConfig: {name}={width} is not divisible by the number of heads ({heads})")
        if self.decoder_lang_mode not in DECODER_LANG_MODES:
            raise ValueError(
                f"TLaserConfig: decoder_lang_mode={self.decoder_lang_mode!r}; expected one of {DECODER_LANG_MODES}"
            )
        if self.init_style not in INIT_STYLES:
            raise ValueError(f"TLaserConfig: init_style={self.init_style!r}; expected one of {INIT_STYLES}")
        if self.distance not in DISTANCES:
            raise ValueError(f"TLaserConfig: distance={self.distance!r}; expected one of {DISTANCES}")
        if not self.languages or len(set(self.languages)) != len(self.languages):
            raise ValueError(f"TLaserConfig: languages={self.languages} must be a non-empty list without repeats")
        if self.pooling not in POOLINGS:
            raise ValueError(f"TLaserConfig: pooling={self.pooling!r}; expected one of {POOLINGS}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"TLaserConfig: label_smoothing={self.label_smoothing} must be in [0, 1)")
        for name in ("distance_beta", "distance_mt_weight", "align_loss_weight", "distance_alpha"):
            if getattr(self, name) < 0:
                raise ValueError(f"TLaserConfig: {name}={getattr(self, name)} must be >= 0")
        if self.distance_lambda is not None and self.distance_lambda < 0:
            raise ValueError(f"TLaserConfig: distance_lambda={self.distance_lambda} must be >= 0 or None")
        if self.distance_negatives <= 0:
            raise ValueError(f"TLaserConfig: distance_negatives={self.distance_negatives} must be a positive integer")
        if self.negative_memory_size < 0 or (self.negative_memory_size and not self.align_loss_weight):
            raise ValueError(
                f"TLaserConfig: negative_memory_size={self.negative_memory_size} must be >= 0, and > 0 only with "
                "align_loss_weight > 0 (the memory's negatives are the alignment loss's)"
            )
        if self.negative_memory_same_language and not self.negative_memory_size:
            raise ValueError(
                "TLaserConfig: negative_memory_same_language=True needs negative_memory_size > 0 (it chooses among the "
                "memory's entries)"
            )
        if not 0.0 <= self.align_margin < 2.0:
            raise ValueError(f"TLaserConfig: align_margin={self.align_margin} must be in [0, 2) (a cosine margin)")
        if self.backbone is not None and "model_type" not in self.backbone:
            raise ValueError("TLaserConfig: backbone must be a config dict with its model_type (config.to_dict())")
        if self.backbone is not None and self.backbone.get("hidden_size", self.hidden_size) != self.hidden_size:
            raise ValueError(f"TLaserConfig: hidden_size={self.hidden_size} differs from the backbone's")
        if self.sentence_modules and self.teacher_dim is not None:
            raise ValueError(
                "TLaserConfig: teacher_dim (a head before pooling) and the backbone's sentence_modules (Dense / "
                "Normalize after pooling) cannot both shape the sentence vector; distil from a teacher of the "
                "vector's width"
            )
        if self.tie_decoder_to_encoder and self.backbone is None:
            raise ValueError("TLaserConfig: tie_decoder_to_encoder needs a backbone of the decoder's width")
        if self.max_position_embeddings < 3:
            raise ValueError("TLaserConfig: max_position_embeddings must leave room for STR_TAG, a token and </s>")

    @property
    def decoder_vocab(self) -> int:
        """Rows of the decoder's vocabulary (``decoder_vocab_size``, else ``vocab_size``)."""
        return self.decoder_vocab_size or self.vocab_size

    @property
    def distance_hinge_weight(self) -> float:
        """lambda of eq. (10); beta / 2 unless set."""
        return self.distance_beta / 2 if self.distance_lambda is None else self.distance_lambda


TLaserConfig.register_for_auto_class()
