"""Parallel corpora, cleaning, pair curriculum, token-budget batching and the translation collator."""

from hf_tlaser.data.batching import COMPOSITIONS, MultiwayBatchSampler, PairBatchSampler, ParallelExamples
from hf_tlaser.data.cleaning import CleaningConfig, CleaningReport, clean_groups
from hf_tlaser.data.collator import TranslationCollator, count_target_tokens
from hf_tlaser.data.corpora import (
    DEFAULT_TRAIN_CORPORA,
    EVALUATION_CORPORA,
    REGISTRY,
    CorpusSpec,
    corpus_languages,
    corpus_sentences,
    corpus_texts,
    load_corpora,
    load_corpus,
    resolve_corpora,
)
from hf_tlaser.data.languages import (
    BILINGUAL_PAIRS,
    DEFAULT_PAIRS,
    DEFAULT_PIVOTS,
    LANGUAGES,
    Pair,
    curriculum_pairs,
    decoder_languages,
    normalize_language,
    parse_languages,
    parse_pairs,
)
from hf_tlaser.data.lengths import sentence_lengths, token_counts
from hf_tlaser.data.paths import get_data_dir
from hf_tlaser.data.pivot import join_on_english, normalize_whitespace
from hf_tlaser.data.readers import (
    DataFormatError,
    from_hf_dataset,
    group_features,
    iter_lines,
    read_aligned,
    read_csv_aligned,
    read_moses,
    read_tsv,
)
from hf_tlaser.data.sources import SPEC_HELP, Source, parse_spec, split_specs

__all__ = [
    "COMPOSITIONS",
    "BILINGUAL_PAIRS",
    "DEFAULT_PAIRS",
    "DEFAULT_PIVOTS",
    "SPEC_HELP",
    "Source",
    "corpus_languages",
    "corpus_sentences",
    "curriculum_pairs",
    "decoder_languages",
    "normalize_language",
    "parse_languages",
    "parse_spec",
    "resolve_corpora",
    "split_specs",
    "DEFAULT_TRAIN_CORPORA",
    "EVALUATION_CORPORA",
    "LANGUAGES",
    "REGISTRY",
    "CleaningConfig",
    "CleaningReport",
    "CorpusSpec",
    "DataFormatError",
    "MultiwayBatchSampler",
    "Pair",
    "PairBatchSampler",
    "ParallelExamples",
    "TranslationCollator",
    "clean_groups",
    "corpus_texts",
    "count_target_tokens",
    "from_hf_dataset",
    "get_data_dir",
    "group_features",
    "iter_lines",
    "join_on_english",
    "load_corpora",
    "load_corpus",
    "normalize_whitespace",
    "parse_pairs",
    "read_aligned",
    "read_csv_aligned",
    "read_moses",
    "read_tsv",
    "sentence_lengths",
    "token_counts",
]
