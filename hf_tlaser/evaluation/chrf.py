"""chrF (Popović 2015), as sacrebleu computes it by default: character n-grams of orders 1-6 with whitespace removed,
statistics summed over the corpus, precision and recall averaged over the orders, then the F-score with beta = 2
(recall twice as important), in percent."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

CHAR_ORDER = 6
BETA = 2.0


def _ngrams(text: str, n: int) -> Counter:
    chars = "".join(text.split())
    return Counter(chars[i : i + n] for i in range(len(chars) - n + 1))


def chrf(hypotheses: Sequence[str], references: Sequence[str], order: int = CHAR_ORDER, beta: float = BETA) -> float:
    """Corpus chrF in percent of ``hypotheses`` against ``references`` (one reference per hypothesis)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    matches, hyp_total, ref_total = [0] * order, [0] * order, [0] * order
    for hyp, ref in zip(hypotheses, references):
        for n in range(1, order + 1):
            h, r = _ngrams(hyp, n), _ngrams(ref, n)
            matches[n - 1] += sum((h & r).values())
            hyp_total[n - 1] += sum(h.values())
            ref_total[n - 1] += sum(r.values())
    orders = [n for n in range(order) if hyp_total[n] and ref_total[n]]  # sacrebleu's effective order
    if not orders:
        return 0.0
    precision = sum(matches[n] / hyp_total[n] for n in orders) / len(orders)
    recall = sum(matches[n] / ref_total[n] for n in orders) / len(orders)
    if precision + recall == 0:
        return 0.0
    return 100 * (1 + beta**2) * precision * recall / (beta**2 * precision + recall)
