"""The one data-dir setting: where the shared public corpora live."""

from __future__ import annotations

import os
from pathlib import Path

from hf_tlaser.errors import MissingDataError

ENV_VAR = "HF_TLASER_DATA"


def get_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """Resolve the corpora folder.

    Order: the ``data_dir`` argument, then ``$HF_TLASER_DATA``, then ``../shared/data`` next to the
    current directory or next to the repository that holds this package. Raises MissingDataError (a
    FileNotFoundError) naming the folder and how to set it.
    """
    if data_dir is None:
        data_dir = os.environ.get(ENV_VAR)
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise MissingDataError(
                f"data dir {path} (from --data-dir / ${ENV_VAR}) does not exist; pass --data-dir or set ${ENV_VAR} "
                "to the folder that holds the corpora"
            )
        return path
    candidates = [Path.cwd() / ".." / "shared" / "data", Path(__file__).resolve().parents[3] / "shared" / "data"]
    for path in candidates:
        if path.is_dir():
            return path.resolve()
    raise MissingDataError(
        f"no data dir found; pass --data-dir or set ${ENV_VAR} (looked in {', '.join(map(str, candidates))})"
    )
