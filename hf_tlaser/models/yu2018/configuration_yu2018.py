"""Configuration of the multilingual seq2seq sentence encoder with similarity loss of Yu, Li & Oguz 2018
("Multilingual seq2seq training with similarity loss for cross-lingual document classification", sec. 2)."""

from __future__ import annotations

from transformers import PretrainedConfig

POOLINGS = ("mean", "max", "self_attention")


class Yu2018Config(PretrainedConfig):
    r"""Configuration of a Yu 2018 encoder (BiLSTM 512 + LSTM 1024, pooled) + attention-free LSTM decoder.

    Defaults are the paper's (sec. 2): 85k shared vocabulary, encoder of two LSTM layers with hidden sizes 512 (the
    first, bidirectional) and 1024, decoder LSTM 1024 without attention, 1024-dim sentence vectors, mean pooling.
    Where the paper gives no value the choice is named below.

    Args:
        vocab_size (`int`, 85000): shared vocabulary (sec. 2).
        embed_dim (`int`, 512): word-embedding size (encoder and decoder, separate tables). The paper starts from
            512-dim multi-CCA vectors (Ammar et al. 2016), which are not available here: the tables are randomly
            initialised (and trainable, as in the paper).
        encoder_hidden_size (`int`, 512): hidden size *per direction* of the first, bidirectional encoder layer.
        hidden_size (`int`, 1024): hidden size of the second (unidirectional) encoder layer: the width of the top
            encoder states and of the sentence vector.
        pooling (`str`, "mean"): how the top encoder states become the sentence vector h(s): "mean" (the paper's
            choice, sec. 2.2), "max" or "self_attention" (Lin et al. 2017, one hop), the three of Table 1. Padding
            never takes part; STR_TAG and ``</s>`` do.
        self_attention_dim (`int`, 350): width d_a of the scoring layer of "self_attention" pooling (Lin et al.'s
            value; the paper gives none).
        decoder_hidden_size (`int`, 1024): decoder LSTM hidden size (sec. 2).
        decoder_layers (`int`, 1): decoder LSTM layers (the paper: "an LSTM").
        dropout (`float`, 0.1): dropout on the word embeddings, between the encoder layers, on the top encoder
            states and on the decoder inputs and outputs (not given in the paper; LASER's value).
        max_position_embeddings (`int`, 2048): longest accepted input (tokens incl. STR_TAG and ``</s>``); an LSTM
            has no position table, this is only the length limit ``encode`` and ``forward`` enforce.
        languages (`list[str]`, ["de", "en", "es", "fr", "it"]): languages the decoder can be asked to produce
            (the paper also has Portuguese, which the corpora here lack); ``tgt_lang`` indexes this list.
        label_smoothing (`float`, 0.0): label smoothing of the translation cross entropy (the paper: plain negative
            log likelihood).
        similarity_weight (`float`, 60.0): alpha of L = L_NMT(s->t) + L_NMT(t->s) + alpha * L_sim (sec. 2.2). The
            paper gives no value, only "starting with the two terms having comparable value". Measured at
            initialisation (eval mode) with this default config on 8 real bilingual batches of 40 newstest2009 pairs
            (en-es, de-en, fr-es, it-en, es-en, de-es, it-es): L_NMT(s->t) + L_NMT(t->s) = 22.9 per target token
            (2 ln 85000 = 22.7) and L_sim = ||h(s) - h(t)||^2 = 0.32-0.39 per pair (mean 0.36), a ratio of 63:
            alpha = 60. (The tiny preset's 192-dim states start smaller: 18.1 against L_sim 0.0009; but trained
            without the similarity loss, a 32-dim model's L_sim grew from 0.0006 to 0.11 in 60 updates, where
            alpha = 60 is comparable again; alpha = 0, 60, 2000 and 20000 ended at the same translation loss there,
            10.44-10.49: the presets keep 60.) 0 disables the similarity loss (the paper's "without" setting).
        similarity_dropout (`bool`, False): whether L_sim sees dropout. False (default): L_sim is computed on the
            vectors of a second, dropout-free encoder pass of the batch (when training with dropout > 0), so that
            identical sentences have L_sim = 0; the translation losses still read the dropped-out vectors. True: on
            the training pass's vectors, whose two sides get independent dropout masks: a floor of a few % of
            ||h||^2 even for identical sentences (4.8 % measured), which alpha = 60 turns into a pull towards small,
            collapsed vectors (docs/training.md, "Yu 2018: the dropout floor of L_sim").
        encoder_l2_weight (`float`, 0.0): weight of the paper's alternative regulariser, an L2 penalty on the
            encoder weights (sec. 2.2, Table 2 "with encoder weight regularization"): the sum of squares of the
            encoder's LSTM and self-attention weight matrices (not the word embeddings nor biases), added once per
            update. 0 (default) disables it.
        pad_token_id, unk_token_id, eos_token_id, cls_token_id, decoder_start_token_id (`int`, 0/1/2/3/2): special
            ids of the shared tokenizer (``cls`` is STR_TAG). The decoder replaces its start token by the
            target-language embedding (Johnson et al. 2016's target-language token).
        tie_word_embeddings (`bool`, False): must stay False (the output projection is decoder_hidden_size wide).
    """

    model_type = "yu2018"

    def __init__(
        self,
        vocab_size: int = 85000,
        embed_dim: int = 512,
        encoder_hidden_size: int = 512,
        hidden_size: int = 1024,
        pooling: str = "mean",
        self_attention_dim: int = 350,
        decoder_hidden_size: int = 1024,
        decoder_layers: int = 1,
        dropout: float = 0.1,
        max_position_embeddings: int = 2048,
        languages: list[str] | tuple[str, ...] = ("de", "en", "es", "fr", "it"),
        label_smoothing: float = 0.0,
        similarity_weight: float = 60.0,
        similarity_dropout: bool = False,
        encoder_l2_weight: float = 0.0,
        pad_token_id: int = 0,
        unk_token_id: int = 1,
        eos_token_id: int = 2,
        cls_token_id: int = 3,
        decoder_start_token_id: int = 2,
        tie_word_embeddings: bool = False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.encoder_hidden_size = encoder_hidden_size
        self.hidden_size = hidden_size
        self.pooling = pooling
        self.self_attention_dim = self_attention_dim
        self.decoder_hidden_size = decoder_hidden_size
        self.decoder_layers = decoder_layers
        self.dropout = dropout
        self.max_position_embeddings = max_position_embeddings
        self.languages = list(languages)
        self.label_smoothing = label_smoothing
        self.similarity_weight = similarity_weight
        self.similarity_dropout = similarity_dropout
        self.encoder_l2_weight = encoder_l2_weight
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

    def _validate(self) -> None:
        for name in (
            "vocab_size",
            "embed_dim",
            "encoder_hidden_size",
            "hidden_size",
            "self_attention_dim",
            "decoder_hidden_size",
            "decoder_layers",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Yu2018Config: {name}={value!r} must be a positive integer")
        if self.pooling not in POOLINGS:
            raise ValueError(f"Yu2018Config: pooling={self.pooling!r}; expected one of {POOLINGS}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"Yu2018Config: dropout={self.dropout} must be in [0, 1)")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"Yu2018Config: label_smoothing={self.label_smoothing} must be in [0, 1)")
        for name in ("similarity_weight", "encoder_l2_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"Yu2018Config: {name}={getattr(self, name)} must be >= 0")
        if not self.languages or len(set(self.languages)) != len(self.languages):
            raise ValueError(f"Yu2018Config: languages={self.languages} must be a non-empty list without repeats")
        if self.max_position_embeddings < 3:
            raise ValueError("Yu2018Config: max_position_embeddings must leave room for STR_TAG, a token and </s>")
        for name in ("pad_token_id", "eos_token_id", "cls_token_id", "decoder_start_token_id", "unk_token_id"):
            value = getattr(self, name)
            if value is None or not 0 <= value < self.vocab_size:
                raise ValueError(f"Yu2018Config: {name}={value!r} must be an id in [0, vocab_size={self.vocab_size})")
        if self.tie_word_embeddings:
            raise ValueError("Yu2018Config: tie_word_embeddings=True is not supported (separate output projection)")


Yu2018Config.register_for_auto_class()
