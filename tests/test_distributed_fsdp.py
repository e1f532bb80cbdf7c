"""FSDP2 on two CPU processes (gloo) through ``accelerate launch --config_file docs/configs/accelerate_cpu_fsdp.yaml``
(fsdp_worker.py): the tiny cT-LASER trains with the DDP run's losses and gradient norms, its FSDP checkpoint resumes to
the same weights and its folder loads with ``AutoModel``; both FSDP configs pass accelerate's launch validation and
their wrap policy wraps exactly our encoder and decoder layers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import FullyShardedDataParallelPlugin, prepare_multi_gpu_env
from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
from safetensors.torch import load_file
from transformers import AutoModel

from hf_tlaser.training.presets import get_preset

CONFIGS = Path(__file__).parents[1] / "docs" / "configs"
TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "decoder_attention_heads": 4,
    "decoder_ffn_dim": 64,
}
STEPS, CHECKPOINT = 4, 2
RTOL = 1e-5
"""fp32 on CPU, same seed and micro-batches: FSDP computes what DDP computes; only the order of two sums differs (the
gradient norm from per-shard norms, the gradients through reduce-scatter instead of all-reduce), a few ulps (seen: the
losses and weights bit-identical over 4 updates, the gradient norms 2e-7 apart). 1e-5 leaves a margin for another
BLAS; a real fault stays far outside it: bf16 autocast moved the first loss by 3e-4 here, and a gradient averaged over
the wrong count or missing a rank's share moves the gradient norm by a factor (compared because Adam would hide a
scaled gradient in the loss)."""


def train_args(tokenizer_dir: Path) -> list[str]:
    args = [
        "--model", "ctlaser", "--preset", "tiny", "--corpora", "wmt-newstest-multiway", "--max-lines", "100",
        "--tokenizer", str(tokenizer_dir), "--max-tokens", "600", "--update-tokens", "1200", "--warmup-updates", "5",
        "--learning-rate", "3e-3", "--logging-steps", "1", "--seed", "3", "--use-cpu", "--precision", "fp32",
        "--max-steps", str(STEPS), "--save-steps", str(CHECKPOINT),
    ]  # fmt: skip
    return args + [f"--set={key}={value}" for key, value in TINY.items()]


def logged(out: Path) -> dict[int, tuple[float, float]]:
    """(loss, grad_norm) of every logged update of the run in ``out``."""
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: (entry["loss"], entry["grad_norm"]) for entry in history if "loss" in entry}


def assert_same_weights(a: Path, b: Path) -> None:
    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert first.keys() == second.keys()
    for name, tensor in first.items():
        torch.testing.assert_close(second[name], tensor, rtol=RTOL, atol=1e-7, msg=name)


def test_fsdp_trains_as_ddp_resumes_and_saves_a_loadable_model(tmp_path, tokenizer_dir):
    worker = Path(__file__).with_name("fsdp_worker.py")
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / "accelerate_cpu_fsdp.yaml"),
        str(worker), str(tmp_path), str(CHECKPOINT), *train_args(tokenizer_dir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        runs = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert runs["ddp"]["wrapper"] == "DistributedDataParallel"
        for name in ("fsdp", "resumed"):
            assert runs[name]["distributed_type"] == "DistributedType.FSDP", (rank, runs)
            assert runs[name]["wrapper"] == "FSDPTLaserForTranslation", (rank, runs)
        assert {run["world_size"] for run in runs.values()} == {2}
    ddp, fsdp, resumed = (logged(tmp_path / name) for name in ("ddp", "fsdp", "resumed"))
    assert sorted(ddp) == sorted(fsdp) == sorted(resumed) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert fsdp[step] == pytest.approx(ddp[step], rel=RTOL), (step, fsdp, ddp)
        assert resumed[step] == pytest.approx(fsdp[step], rel=RTOL), (step, resumed, fsdp)
    assert (tmp_path / "fsdp" / f"checkpoint-{CHECKPOINT}" / "pytorch_model_fsdp.bin").is_file()  # FSDP's own
    assert_same_weights(tmp_path / "ddp", tmp_path / "fsdp")
    assert_same_weights(tmp_path / "fsdp", tmp_path / "resumed")
    encoder = AutoModel.from_pretrained(tmp_path / "fsdp", trust_remote_code=True)
    saved = load_file(tmp_path / "fsdp" / "model.safetensors")
    assert type(encoder).__name__ == "TLaserModel"
    torch.testing.assert_close(encoder.embed_tokens.weight, saved["encoder.embed_tokens.weight"], rtol=0, atol=0)


@pytest.mark.parametrize("config", ["accelerate_cpu_fsdp.yaml", "accelerate_fsdp.yaml"])
def test_fsdp_config_validates_and_wraps_our_layers(config, tokenizer):
    """What ``accelerate launch --config_file`` checks and hands to the processes (its environment), and the FSDP plugin
    the processes build from it: the auto-wrap policy resolves to our layer classes and wraps every encoder and decoder
    layer, nothing else (the root module is sharded as a whole)."""
    args = launch_command_parser().parse_args(["--config_file", str(CONFIGS / config), "train.py"])
    args, _, _ = _validate_launch_command(args)  # the launcher's own checks and defaults (a private function)
    assert args.use_fsdp and args.fsdp_version == 2
    args.main_process_port = 0  # a free port: the check of the default port would depend on the machine
    with mock.patch.dict(os.environ, prepare_multi_gpu_env(args)):
        plugin = FullyShardedDataParallelPlugin()
    assert plugin.state_dict_type.name == "FULL_STATE_DICT"  # a checkpoint with model.safetensors, as --resume checks
    preset = get_preset("ctlaser", "tiny")
    model = preset.model_class(preset.make_config(len(tokenizer), **TINY))
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    wrapped = [name for name, module in model.named_modules() if policy(module)]
    layers = [f"encoder.layers.{i}" for i in range(model.config.num_hidden_layers)]
    assert wrapped == layers + [f"decoder.layers.{i}" for i in range(model.config.decoder_layers)]
