"""``hf-tlaser push MODEL_DIR REPO_ID``: publish a trained folder on the Hugging Face Hub."""

from __future__ import annotations

import argparse
import sys

from hf_tlaser.commands import run_command

from .push import push_to_hub

DESCRIPTION = (
    "Publish a trained model folder on the Hugging Face Hub: weights, model code, tokenizer, sentence-transformers "
    "files and a model card with the latest `hf-tlaser evaluate` results (MODEL_DIR/eval/results.json). The "
    "repository is created when missing; a generated card is rewritten on every push, a card you wrote is kept. A "
    "cNV folder (one encoder and tokenizer per language) has no sentence-transformers files."
)


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-tlaser push`` argument parser."""
    p = argparse.ArgumentParser(prog="hf-tlaser push", description=DESCRIPTION)
    p.add_argument("model_dir", help="folder written by hf-tlaser train (config.json, weights, tokenizer)")
    p.add_argument("repo_id", help="NAMESPACE/NAME of the model repository, e.g. my-org/ct-laser-tiny")
    p.add_argument("--private", action="store_true", help="create the repository as private")
    p.add_argument("--revision", help="branch to commit to, created when missing (default: main)")
    p.add_argument("--token", help="Hub token (default: HF_TOKEN, else the cached hf auth login)")
    p.add_argument("--commit-message", help="commit message (default: 'Upload <folder name> with hf_tlaser')")
    p.add_argument(
        "--normalize",
        action="store_true",
        help="sentence-transformers output: unit-length vectors (not for cNV)",
    )
    p.add_argument(
        "--results",
        help="evaluation results.json for the card (default: the newer of MODEL_DIR/eval/results.json and "
        "MODEL_DIR/results.json)",
    )
    p.add_argument("--endpoint", help="Hub URL (default: HF_ENDPOINT or https://huggingface.co)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``hf-tlaser push``: 0 on success, 2 with one line on stderr for a usage mistake (nothing uploaded)."""
    args = build_parser().parse_args(argv)

    def work() -> int:
        info = push_to_hub(
            args.model_dir,
            args.repo_id,
            private=args.private or None,
            revision=args.revision,
            token=args.token,
            commit_message=args.commit_message,
            normalize=True if args.normalize else None,
            results=args.results,
            endpoint=args.endpoint,
        )
        print(f"pushed {args.model_dir} to {args.repo_id}: {info.commit_url}")
        return 0

    return run_command("hf-tlaser push", work, log=False)


if __name__ == "__main__":
    sys.exit(main())
