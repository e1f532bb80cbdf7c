"""Local ``evaluate`` metric modules, loadable offline: ``evaluate.load(metric_path("xsim"))``."""

from __future__ import annotations

from pathlib import Path

METRICS = ("xsim", "accuracy")


def metric_path(name: str) -> str:
    """Folder of a shipped metric, to pass to ``evaluate.load``."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; valid: {', '.join(METRICS)}")
    return str(Path(__file__).parent / name)


def load_metric(name: str, **kwargs):
    """``evaluate.load`` of a shipped metric (works with ``HF_HUB_OFFLINE=1``)."""
    import evaluate

    return evaluate.load(metric_path(name), **kwargs)
