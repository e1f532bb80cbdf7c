"""LASER (BiLSTM) baseline configuration: LASER_1, LASER_6 and cLASER of Li & Mak 2020 (Table 1), after
Artetxe & Schwenk 2019 and the fairseq-laser ``laser_lstm_artetxe`` architecture the authors borrowed."""

from __future__ import annotations

from transformers import PretrainedConfig

DISTANCES = ("l2", "squared_l2")
INIT_STYLES = ("fairseq", "bert")


class LaserConfig(PretrainedConfig):
    r"""Configuration of a LASER BiLSTM encoder + LSTM decoder (LASER_1, LASER_6; cLASER with the distance loss).

    Defaults are the paper's LASER_1 (Table 1: 512x2 encoder, 2048 decoder, 1 encoder and 1 decoder layer, 50k
    vocabulary) with the remaining sizes of Artetxe & Schwenk 2019 (320-dim BPE embeddings, 32-dim language
    embedding, dropout 0.1). Use ``num_layers=6`` for LASER_6 and ``distance_beta=0.25`` (default) for cLASER.

    Args:
        vocab_size (`int`, 50000): size of the joint BPE vocabulary (shared by encoder and decoder).
        embed_dim (`int`, 320): token-embedding size of the encoder and of the decoder (separate tables).
        lstm_hidden_size (`int`, 512): BiLSTM hidden size *per direction*.
        num_layers (`int`, 1): BiLSTM encoder layers (1 for LASER_1, 6 for LASER_6).
        dropout (`float`, 0.1): LASER's dropout, used as fairseq-laser's ``dropout_in`` and ``dropout_out``:
            on the encoder embeddings, between BiLSTM layers, on the BiLSTM outputs (before max-pooling), on the
            decoder input (token + language embedding) and on the decoder LSTM outputs.
        decoder_hidden_size (`int`, 2048): decoder LSTM hidden size d_z.
        decoder_layers (`int`, 1): decoder LSTM layers.
        max_position_embeddings (`int`, 2048): longest accepted input (tokens incl. STR_TAG and `</s>`). An LSTM
            has no position table; this is only the length limit ``encode`` and ``forward`` enforce.
        pooling (`str`, "max"): the sentence vector, the max over the non-pad BiLSTM outputs (LASER's only pooling);
            stated in the config so that a saved folder's sentence-transformers layout reads it from there.
        init_style (`str`, "fairseq"): weight initialisation. "fairseq" is fairseq-laser's (``fairseq.models.lstm``
            ``Embedding``, ``Linear`` and ``LSTM`` helpers): every embedding, linear and LSTM weight and bias
            uniform(-0.1, 0.1), pad rows zero. "bert" draws linear and embedding weights from
            N(0, initializer_range) with zero biases and pad rows (LSTM parameters stay uniform(-0.1, 0.1)).
        initializer_range (`float`, 0.02): std of the N(0, std) initialisation of ``init_style="bert"``.
        languages (`list[str]`, ["de", "en", "es", "fr", "it"]): languages the decoder can be asked to produce;
            `tgt_lang` indexes this list.
        lang_embed_dim (`int`, 32): size of the target-language embedding fed to the decoder at every step.
        label_smoothing (`float`, 0.1): label smoothing of the translation cross entropy.
        distance_beta (`float`, 0.25): weight beta of the parallel-pair distance d_p (eq. 10). 0 disables the
            distance-constraint loss (plain LASER); it is only computed when the batch carries target sentences.
        distance_lambda (`float`, None): weight lambda of the hinge terms (eq. 10); None means beta / 2.
        distance_alpha (`float`, 0.5): hinge margin alpha (eq. 9).
        distance_negatives (`int`, 20): in-batch negatives N_s per sentence and direction.
        distance (`str`, "l2"): "l2" (authors' code: plain L2 norm) or "squared_l2" (paper eq. 7-8).
        distance_vnorm_grad (`bool`, True): let gradients flow through v_norm as the authors' code does.
        distance_eps (`float`, 1e-6): epsilon of the v_norm normalisation (eq. 7-8).
        distance_mt_weight (`float`, 0.5): weight of the translation loss when the distance loss is on (eq. 10).
        align_loss_weight (`float`, 0.0): weight of the optional in-batch contrastive alignment loss, averaged per
            pair and added to the per-token translation loss. 0 disables it.
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
        pad_token_id, unk_token_id, eos_token_id, cls_token_id, decoder_start_token_id (`int`, 0/1/2/3/2): special
            ids of the shared tokenizer (``cls`` is STR_TAG; see ``TLaserConfig``).
        tie_word_embeddings (`bool`, False): must stay False; the output projection (decoder_hidden_size wide)
            cannot share the embed_dim-wide embedding table.

    ``hidden_size`` is derived, not set: ``2 * lstm_hidden_size`` (1024), the width of the BiLSTM outputs and of
    the max-pooled sentence vector (``sentence_embedding_dim``); ``encode`` reads it.
    """

    model_type = "laser"

    def __init__(
        self,
        vocab_size: int = 50000,
        embed_dim: int = 320,
        lstm_hidden_size: int = 512,
        num_layers: int = 1,
        dropout: float = 0.1,
        decoder_hidden_size: int = 2048,
        decoder_layers: int = 1,
        max_position_embeddings: int = 2048,
        pooling: str = "max",
        init_style: str = "fairseq",
        initializer_range: float = 0.02,
        languages: list[str] | tuple[str, ...] = ("de", "en", "es", "fr", "it"),
        lang_embed_dim: int = 32,
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
        **kwargs,
    ):
        hidden_size = kwargs.pop("hidden_size", None)  # derived; saved in config.json, checked on load
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.lstm_hidden_size = lstm_hidden_size
        self.num_layers = num_layers
        self.dropout = dropout
        self.decoder_hidden_size = decoder_hidden_size
        self.decoder_layers = decoder_layers
        self.max_position_embeddings = max_position_embeddings
        self.pooling = pooling
        self.init_style = init_style
        self.initializer_range = initializer_range
        self.languages = list(languages)
        self.lang_embed_dim = lang_embed_dim
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
        super().__init__(
            decoder_start_token_id=decoder_start_token_id,  # transformers 4.x's PretrainedConfig sets it
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self._validate()
        if hidden_size is not None:
            self.hidden_size = hidden_size  # the setter raises unless it equals 2 * lstm_hidden_size

    @property
    def hidden_size(self) -> int:
        """Width of the BiLSTM outputs and of the sentence vector: 2 * lstm_hidden_size."""
        return 2 * self.lstm_hidden_size

    @hidden_size.setter
    def hidden_size(self, value: int) -> None:
        if value != 2 * self.lstm_hidden_size:
            raise ValueError(
                f"LaserConfig: hidden_size is 2 * lstm_hidden_size ({2 * self.lstm_hidden_size}); set "
                f"lstm_hidden_size instead of hidden_size={value}"
            )

    @property
    def sentence_embedding_dim(self) -> int:
        """Size of the max-pooled sentence vector (= hidden_size = 2 * lstm_hidden_size)."""
        return self.hidden_size

    def _validate(self) -> None:
        for name in (
            "vocab_size",
            "embed_dim",
            "lstm_hidden_size",
            "num_layers",
            "decoder_hidden_size",
            "decoder_layers",
            "lang_embed_dim",
            "distance_negatives",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"LaserConfig: {name}={value!r} must be a positive integer")
        if self.negative_memory_size < 0 or (self.negative_memory_size and not self.align_loss_weight):
            raise ValueError(
                f"LaserConfig: negative_memory_size={self.negative_memory_size} must be >= 0, and > 0 only with "
                "align_loss_weight > 0 (the memory's negatives are the alignment loss's)"
            )
        if self.negative_memory_same_language and not self.negative_memory_size:
            raise ValueError(
                "LaserConfig: negative_memory_same_language=True needs negative_memory_size > 0 (it chooses among the "
                "memory's entries)"
            )
        if self.pooling != "max":
            raise ValueError(
                f"LaserConfig: pooling={self.pooling!r}; LASER's sentence vector is the max (pooling='max')"
            )
        if not 0.0 <= self.align_margin < 2.0:
            raise ValueError(f"LaserConfig: align_margin={self.align_margin} must be in [0, 2) (a cosine margin)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LaserConfig: dropout={self.dropout} must be in [0, 1)")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"LaserConfig: label_smoothing={self.label_smoothing} must be in [0, 1)")
        for name in ("distance_beta", "distance_mt_weight", "align_loss_weight", "distance_alpha"):
            if getattr(self, name) < 0:
                raise ValueError(f"LaserConfig: {name}={getattr(self, name)} must be >= 0")
        if self.distance_lambda is not None and self.distance_lambda < 0:
            raise ValueError(f"LaserConfig: distance_lambda={self.distance_lambda} must be >= 0 or None")
        if self.init_style not in INIT_STYLES:
            raise ValueError(f"LaserConfig: init_style={self.init_style!r}; expected one of {INIT_STYLES}")
        if self.distance not in DISTANCES:
            raise ValueError(f"LaserConfig: distance={self.distance!r}; expected one of {DISTANCES}")
        if not self.languages or len(set(self.languages)) != len(self.languages):
            raise ValueError(f"LaserConfig: languages={self.languages} must be a non-empty list without repeats")
        if self.max_position_embeddings < 3:
            raise ValueError("LaserConfig: max_position_embeddings must leave room for STR_TAG, a token and </s>")
        for name in ("pad_token_id", "eos_token_id", "cls_token_id", "decoder_start_token_id", "unk_token_id"):
            value = getattr(self, name)
            if value is None or not 0 <= value < self.vocab_size:
                raise ValueError(f"LaserConfig: {name}={value!r} must be an id in [0, vocab_size={self.vocab_size})")
        if self.tie_word_embeddings:
            raise ValueError(
                "LaserConfig: tie_word_embeddings=True is not supported; the output projection is "
                f"decoder_hidden_size={self.decoder_hidden_size} wide, the embeddings embed_dim={self.embed_dim}"
            )

    @property
    def distance_hinge_weight(self) -> float:
        """lambda of eq. (10); beta / 2 unless set."""
        return self.distance_beta / 2 if self.distance_lambda is None else self.distance_lambda

    def to_dict(self) -> dict:
        output = super().to_dict()
        output["hidden_size"] = self.hidden_size  # informative for tools that read config.json; ignored on load
        return output


LaserConfig.register_for_auto_class()
