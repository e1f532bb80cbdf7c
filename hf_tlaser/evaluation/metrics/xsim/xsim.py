"""xsim: LASER's similarity-search error rate (%) as a local ``evaluate`` metric.

``predictions`` are the source embeddings, ``references`` the target embeddings; row i of one is the
translation of row i of the other.
"""

import datasets
import evaluate
import numpy as np

from hf_tlaser.evaluation.retrieval import xsim

_DESCRIPTION = """Error rate (%) of margin-based nearest-neighbour retrieval of aligned translations (LASER xsim).
Margins: absolute (cosine), distance (cos - avg_knn), ratio (cos / avg_knn)."""

_KWARGS_DESCRIPTION = """
Args:
    predictions: source embeddings, one list of floats per sentence.
    references: target embeddings, aligned with predictions.
    margin: "absolute", "distance" or "ratio" (default "ratio").
    k: neighbourhood size of the margin (default 4).
Returns:
    xsim: error rate in percent; errors: number of wrong retrievals; n: number of sentences.
Example:
    >>> metric = evaluate.load("hf_tlaser/evaluation/metrics/xsim")
    >>> metric.compute(predictions=[[1.0, 0.0], [0.0, 1.0]], references=[[1.0, 0.1], [0.1, 1.0]])
    {'xsim': 0.0, 'errors': 0, 'n': 2}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Xsim(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Artetxe and Schwenk (2019), LASER; https://github.com/facebookresearch/LASER",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("float32")),
                    "references": datasets.Sequence(datasets.Value("float32")),
                }
            ),
        )

    def _compute(self, predictions, references, margin="ratio", k=4):
        src = np.asarray(predictions, dtype=np.float32)
        error = xsim(src, np.asarray(references, dtype=np.float32), margin=margin, k=k)
        return {"xsim": error, "errors": int(round(error * len(src) / 100)), "n": len(src)}
