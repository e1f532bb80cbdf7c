"""Subprocess of benchmark 5: peak-memory growth of one encoder forward, measured as a ``ru_maxrss`` delta.

``python -m benchmarks.memory_worker SPEC.json`` imports torch and the model code once, then forks one child per
document of the spec (the parent runs no torch op, so the children start with clean thread pools and allocator).
Each child builds the encoder, runs a warm-up forward on 8 tokens (allocator, oneDNN and thread-pool set-up), reads
its peak RSS, runs one forward (the ``encode`` path, ``pooled_only=True``, inference mode) and reports the peak-RSS
growth. A fresh process per document keeps earlier, larger forwards from hiding the peak (``ru_maxrss`` never goes
down, and the allocator keeps freed memory). Prints ``{document: result}`` as JSON.
"""

from __future__ import annotations

import json
import os
import resource
import sys

import torch

from hf_tlaser.hardware import configure_threads
from hf_tlaser.models.tlaser import TLaserModel
from hf_tlaser.training.presets import get_preset


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(spec: dict, ids: list[int]) -> dict[str, float]:
    """Peak-RSS growth (MiB) of one forward on ``ids`` after a warm-up."""
    configure_threads(spec.get("threads"))
    torch.manual_seed(0)
    config = get_preset("tlaser", spec["preset"]).make_config(spec["vocab_size"], **spec.get("overrides", {}))
    model = TLaserModel(config).eval()
    ids = torch.tensor([ids])
    with torch.inference_mode():
        model(input_ids=ids[:, :8], pooled_only=True)
        before = peak_rss_mib()
        model(input_ids=ids, pooled_only=True)
        after = peak_rss_mib()
    return {"tokens": ids.shape[1], "base_mib": before, "peak_mib": after, "delta_mib": after - before}


def in_child(spec: dict, ids: list[int]) -> dict[str, float]:
    """``measure`` in a forked child process; its result comes back through a pipe."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        status = 0
        try:
            payload = json.dumps(measure(spec, ids))
        except Exception as error:  # report, never fall through into the parent's loop
            payload, status = json.dumps({"error": repr(error)}), 1
        with os.fdopen(write_fd, "w") as pipe:
            pipe.write(payload)
        os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        result = json.loads(pipe.read())
    os.waitpid(pid, 0)
    if "error" in result:
        raise RuntimeError(f"memory child failed: {result['error']}")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as handle:
        spec = json.load(handle)
    print(json.dumps({name: in_child(spec, ids) for name, ids in spec["documents"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
