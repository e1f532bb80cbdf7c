"""Evaluation: xsim / P@1 retrieval, margin-based bitext mining, zero-shot classification, readers, plots, and the
reference rows (random init, ``tfidf-char`` lexical baseline, majority class, other models given with
``--reference`` and their cross-model rows) reported next to every model.

Everything works on embeddings (numpy or torch) or on an ``embed(texts) -> np.ndarray`` callable, so it is
independent of the model. kNN uses faiss when importable, else torch (``backend=`` to force one).
"""

from hf_tlaser.bitext.knn import knn
from hf_tlaser.bitext.margin import MARGINS
from hf_tlaser.bitext.mining import mine, write_bitexts
from hf_tlaser.encoding import laser_mldoc_cleanup

from .classifier import ClassifierConfig, TransferResult, select_epoch, zero_shot_transfer
from .metrics import load_metric, metric_path
from .plots import (
    plot_bars,
    plot_embeddings,
    plot_heatmap,
    plot_result_rows,
    plot_training_curves,
    plot_transfer_matrix,
)
from .readers import (
    CLASSIFICATION_SETS,
    LANGS,
    LANGUAGE_LISTS,
    RETRIEVAL_SETS,
    LabeledSplit,
    PivotPairs,
    read_flores_devtest,
    read_mldoc,
    read_mldoc_file,
    read_ntrex128,
    read_sib200,
    read_tico19,
    read_ud_pud,
    read_umsab,
    read_xed_dev,
)
from .report import markdown_table, write_report
from .retrieval import precision_at_1, xsim, xsim_both, xsim_matrix
from .suite import (
    SUITES,
    Reference,
    RetrievalResult,
    embed_classification,
    embed_retrieval,
    evaluate_classification,
    evaluate_retrieval,
    lexical_reference,
    read_classification,
    read_retrieval_sets,
    run_suite,
    score_retrieval,
)

__all__ = [
    "CLASSIFICATION_SETS",
    "LANGS",
    "LANGUAGE_LISTS",
    "MARGINS",
    "RETRIEVAL_SETS",
    "SUITES",
    "ClassifierConfig",
    "LabeledSplit",
    "PivotPairs",
    "Reference",
    "RetrievalResult",
    "TransferResult",
    "embed_classification",
    "embed_retrieval",
    "evaluate_classification",
    "evaluate_retrieval",
    "knn",
    "laser_mldoc_cleanup",
    "lexical_reference",
    "load_metric",
    "markdown_table",
    "metric_path",
    "mine",
    "plot_bars",
    "plot_embeddings",
    "plot_heatmap",
    "plot_result_rows",
    "plot_training_curves",
    "plot_transfer_matrix",
    "precision_at_1",
    "read_classification",
    "read_retrieval_sets",
    "read_flores_devtest",
    "read_mldoc",
    "read_mldoc_file",
    "read_ntrex128",
    "read_sib200",
    "read_tico19",
    "read_ud_pud",
    "read_umsab",
    "read_xed_dev",
    "run_suite",
    "score_retrieval",
    "select_epoch",
    "write_bitexts",
    "write_report",
    "xsim",
    "xsim_both",
    "xsim_matrix",
    "zero_shot_transfer",
]
