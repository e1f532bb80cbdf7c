"""Accuracy as a local ``evaluate`` metric (the Hub's ``accuracy`` cannot be loaded offline)."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = "Fraction of predictions equal to the references (optionally weighted)."

_KWARGS_DESCRIPTION = """
Args:
    predictions: predicted labels (int).
    references: gold labels (int).
    normalize: if False, return the number of correct predictions instead of the fraction.
    sample_weight: optional weights.
Returns:
    accuracy: float.
Example:
    >>> metric = evaluate.load("hf_tlaser/evaluation/metrics/accuracy")
    >>> metric.compute(predictions=[0, 1, 1], references=[0, 1, 0])
    {'accuracy': 0.6666666666666666}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}),
        )

    def _compute(self, predictions, references, normalize=True, sample_weight=None):
        correct = (np.asarray(predictions) == np.asarray(references)).astype(float)
        weights = np.ones_like(correct) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        total = float((correct * weights).sum())
        return {"accuracy": total / float(weights.sum()) if normalize else total}
