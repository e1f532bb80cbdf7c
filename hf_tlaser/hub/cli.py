"""``hf-tlaser push MODEL_DIR REPO_ID``: publish a trained folder on the Hugging Face Hub."""

from __future__ import annotations

import argparse
import sys

from .push import MissingTokenError, push_to_hub


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hf-tlaser push", description=__doc__.split("\n")[0].strip("`"))
    p.add_argument("model_dir", help="folder written by `hf-tlaser train` (save_pretrained + tokenizer)")
    p.add_argument("repo_id", help="namespace/name of the model repository (created when missing)")
    p.add_argument("--private", action="store_true", help="create the repository as private")
    p.add_argument("--revision", default=None, help="branch to commit to (default: main)")
    p.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the cached login)")
    p.add_argument("--commit-message", default=None)
    p.add_argument("--normalize", action="store_true", help="sentence-transformers output: unit-length vectors")
    p.add_argument("--results", default=None, help="evaluation results.json for the card (default: MODEL_DIR's)")
    p.add_argument("--endpoint", default=None, help="Hub URL (default: HF_ENDPOINT or huggingface.co)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``hf-tlaser push``; returns the exit status (1 without a token, before any upload)."""
    args = build_parser().parse_args(argv)
    try:
        info = push_to_hub(
            args.model_dir,
            args.repo_id,
            private=args.private or None,
            revision=args.revision,
            token=args.token,
            commit_message=args.commit_message,
            normalize=args.normalize,
            results=args.results,
            endpoint=args.endpoint,
        )
    except MissingTokenError as err:
        print(f"hf-tlaser push: {err}", file=sys.stderr)
        return 1
    print(f"pushed {args.model_dir} to {args.repo_id}: {info.commit_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
