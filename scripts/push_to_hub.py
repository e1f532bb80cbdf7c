"""Thin wrapper: ``python scripts/push_to_hub.py MODEL_DIR REPO_ID [options]`` = ``hf-tlaser push ...``."""

import sys

from hf_tlaser.hub.cli import main

if __name__ == "__main__":
    sys.exit(main())
