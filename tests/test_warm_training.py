"""``hf-tlaser train --init-from`` through the Trainer, on the tiny random XLM-R of ``test_warm_start``: the frozen
warm-up leaves every backbone weight bit for bit as it started (tied decoder or not) and the updates after it move
them; ``--encoder-lr`` reaches the optimizer's parameter groups; the published folder keeps the start's dtype (fp16
tensors, a float32 config) and no pickle, names the run after its backbone, and loads back in transformers and
sentence-transformers with the vectors of the trained model."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerFast, XLMRobertaModel

from hf_tlaser.models.tlaser import TLaserForTranslation
from hf_tlaser.training.cli import parse_args, train
from hf_tlaser.training.run import cast_state
from hf_tlaser.training.warm import backbone_overrides, check_backbone
from tests import test_warm_start as warm
from tests.fresh_process import auto_model_vectors, fresh_vectors

TEXTS = warm.TEXTS
LEARNING_RATE, ENCODER_LR = 1e-3, 3e-4
FROZEN = 2
"""Updates of the frozen warm-up in ``frozen_run`` (then one more, unfrozen)."""


def run(out: Path, spec: Path, *extra: str):
    """The trainer of a tiny warm-started cT-LASER run (``train_args`` of ``test_warm_start``)."""
    return train(parse_args(warm.train_args(out, spec, *extra)))


def backbone_tensors(path: Path, prefix: str = "encoder.backbone.") -> dict[str, torch.Tensor]:
    """The backbone's tensors in a safetensors file, under the backbone's own names."""
    return {key.removeprefix(prefix): value for key, value in load_file(path).items() if key.startswith(prefix)}


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def frozen_run(request, backbone_dir, tmp_path_factory):
    """3 updates (``FROZEN`` frozen) with weight decay, a checkpoint after each (the last two kept), the decoder's
    token tables tied to the backbone's embeddings or not; (trainer, output dir)."""
    out = tmp_path_factory.mktemp("frozen") / "run"
    tie = ["--set=tie_decoder_to_encoder=true"] if request.param else []
    trainer = run(
        out, backbone_dir, "--max-steps", "3", "--save-steps", "1", "--freeze-encoder-steps", str(FROZEN),
        "--weight-decay", "0.1", "--warmup-updates", "0", "--learning-rate", str(LEARNING_RATE),
        "--encoder-lr", str(ENCODER_LR), *tie,
    )  # fmt: skip
    assert trainer.model.config.tie_decoder_to_encoder == request.param
    return trainer, out


def test_a_frozen_warmup_changes_nothing_of_the_backbone_and_the_updates_after_it_do(frozen_run, backbone_dir):
    _, out = frozen_run
    start = load_file(backbone_dir / "model.safetensors")
    frozen = backbone_tensors(out / f"checkpoint-{FROZEN}" / "model.safetensors")
    trained = backbone_tensors(out / f"checkpoint-{FROZEN + 1}" / "model.safetensors")
    assert set(frozen) == set(trained) >= {"embeddings.word_embeddings.weight"} and set(start) >= set(frozen)
    assert [name for name in frozen if not torch.equal(frozen[name], start[name])] == []
    assert [name for name in trained if torch.equal(trained[name], frozen[name])] == []


def test_encoder_lr_is_the_rate_of_every_encoder_weight_and_only_theirs(frozen_run):
    trainer, _ = frozen_run
    model = trainer.model
    encoder = {id(p) for p in model.encoder.parameters()}
    rate = {}  # parameter -> the peak rate of its group (LambdaLR keeps it as initial_lr)
    for group in trainer.optimizer.param_groups:
        for p in group["params"]:
            assert id(p) not in rate, "a parameter in two groups"
            rate[id(p)] = group["initial_lr"]
    scaled = {group["lr"] / group["initial_lr"] for group in trainer.optimizer.param_groups}
    assert max(scaled) == pytest.approx(min(scaled)) and max(scaled) < 1  # the schedule scales every group alike
    assert set(rate) == {id(p) for p in model.parameters()}
    assert {rate[i] for i in encoder} == {ENCODER_LR}
    assert {rate[id(p)] for p in model.parameters() if id(p) not in encoder} == {LEARNING_RATE}
    decay = {id(p) for g in trainer.optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert {n for n, p in model.encoder.named_parameters() if id(p) not in decay} >= {
        "backbone.embeddings.LayerNorm.weight",
        "backbone.encoder.layer.0.attention.self.query.bias",
    }
    assert id(model.encoder.backbone.encoder.layer[0].attention.self.query.weight) in decay


@pytest.fixture(scope="module")
def fp16_backbone(tmp_path_factory, backbone_dir) -> Path:
    """The tiny XLM-R stored as the e5 copy in ``../shared/data`` is: float16 tensors, a config that says float32."""
    folder = tmp_path_factory.mktemp("fp16") / "e5-tiny"
    XLMRobertaModel.from_pretrained(backbone_dir, dtype=torch.float16, add_pooling_layer=False).save_pretrained(folder)
    PreTrainedTokenizerFast.from_pretrained(backbone_dir).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dtype": "float32"}))
    return folder


def test_a_backbone_whose_config_says_float16_trains_in_float32(fp16_backbone, tmp_path):
    folder = tmp_path / "half"
    shutil.copytree(fp16_backbone, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dtype": "float16"}))
    backbone = check_backbone(str(folder), "ctlaser", None)
    assert backbone.stored_dtype == torch.float16
    config = warm.warm_config(backbone)
    config.backbone = backbone_overrides(backbone, "backbone", {})["backbone"]
    model = TLaserForTranslation(config)
    backbone.load_into(model.encoder)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert torch.isfinite(model(**warm.toy_batch(backbone.tokenizer)).loss)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


@pytest.fixture(scope="module")
def published(fp16_backbone, tmp_path_factory):
    """One update from the fp16 backbone: (output dir, vectors of the trained model before saving, log lines)."""
    out = tmp_path_factory.mktemp("published") / "run"
    lines, logger = Lines(), logging.getLogger("hf_tlaser.train")
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        trainer = run(out, fp16_backbone, "--max-steps", "1", "--save-steps", "1", "--freeze-encoder-steps", "0")
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out)
    vectors = trainer.model.encoder.eval().encode(TEXTS, tokenizer)
    return out, np.asarray(vectors, dtype=np.float32), lines.lines


def test_the_published_folder_keeps_the_start_dtype_and_no_pickle(published):
    out, _, _ = published
    with safe_open(out / "model.safetensors", "pt") as weights:
        stored = {weights.get_slice(key).get_dtype() for key in weights.keys()}
    assert stored == {"F16", "I64"}  # the restricted decoder vocabulary's ids are integers
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"  # loaders upcast
    assert not (out / "training_args.bin").exists()
    checkpoint = out / "checkpoint-1"
    assert (checkpoint / "training_args.bin").is_file()  # what a resume reads stays with the checkpoint
    assert {t.dtype for t in load_file(checkpoint / "model.safetensors").values() if t.is_floating_point()} == {
        torch.float32
    }


def test_the_log_names_the_backbone_and_the_special_ids_are_information(published):
    _, _, lines = published
    assert any(line.startswith("INFO ctlaser on e5-tiny: ") and "M parameters" in line for line in lines)
    assert [line for line in lines if "special-token ids from the tokenizer" in line][0].startswith("INFO ")


def test_the_published_folder_gives_the_trained_vectors_in_a_fresh_process(published, tmp_path):
    out, expected, _ = published
    auto = auto_model_vectors(out, TEXTS, tmp_path, check="assert model.dtype == torch.float32, model.dtype")
    st = fresh_vectors(
        f"""
        import json, torch
        from sentence_transformers import SentenceTransformer
        model = SentenceTransformer({str(out)!r}, trust_remote_code=True)
        assert next(model.parameters()).dtype == torch.float32
        print(json.dumps(model.encode({TEXTS!r}).tolist()))
        """,
        tmp_path,
    )
    for vectors in (auto, st):
        cosine = (vectors * expected).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(expected, axis=1)
        assert cosine.min() > 0.999


def test_cast_state_keeps_shared_tensors_shared_and_refuses_what_does_not_fit():
    weight = torch.randn(3, 2)
    state = {"lm_head.weight": weight.view(3, 2), "embed.weight": weight.view(3, 2), "ids": torch.arange(3)}
    cast = cast_state(state, torch.float16)
    assert cast["lm_head.weight"].dtype == torch.float16 and torch.equal(cast["lm_head.weight"], weight.half())
    assert cast["lm_head.weight"].data_ptr() == cast["embed.weight"].data_ptr()  # still tied for save_pretrained
    assert cast["ids"] is state["ids"]
    assert cast_state({"big": torch.tensor([1e5])}, torch.float16) is None  # inf in float16
    assert cast_state({"big": torch.tensor([1e5])}, torch.bfloat16)["big"].isfinite().all()
