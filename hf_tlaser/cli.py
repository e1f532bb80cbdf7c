"""``hf-tlaser`` console script: one sub-command per workflow, each implemented next to its code."""

from __future__ import annotations

import importlib
import sys

# sub-command -> module exposing ``main(argv: list[str]) -> int``
COMMANDS = {
    "train-tokenizer": "hf_tlaser.tokenization",
    "train": "hf_tlaser.training.cli",
    "evaluate": "hf_tlaser.evaluation.cli",
    "push": "hf_tlaser.hub.cli",
}


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``hf-tlaser COMMAND ...`` to the module that implements COMMAND."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"} or argv[0] not in COMMANDS:
        print("usage: hf-tlaser {" + ",".join(COMMANDS) + "} [options]")
        if argv and argv[0] not in {"-h", "--help"}:
            print(f"hf-tlaser: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    module = importlib.import_module(COMMANDS[argv[0]])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
