"""The stages' records on the GPU machine (also ``gpu_session.py`` subcommands): SUMMARY.md, JSON notes,
environment.json, distributed.json's facts of a run, the checkpoint spacing, train.json."""

from __future__ import annotations

import json
from pathlib import Path

STACK_VERSIONS = (
    "transformers",
    "accelerate",
    "datasets",
    "sentence-transformers",
    "huggingface-hub",
    "tokenizers",
    "numpy",
    "deepspeed",
    "hf_tlaser",
)
"""The packages whose versions ``environment.json`` records."""
LOG_MENTIONS = (
    "FullyShardedDataParallel",
    "fully_shard",
    "DeepSpeed",
    "ZeRO",
    "DistributedDataParallel",
    "find_unused_parameters",
)
"""What a dist run's log is searched for: the strategy that really ran."""


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summary(out: Path, work: Path | None = None) -> str:
    """OUT/SUMMARY.md: the headline numbers of every stage that left results (missing stages say so)."""
    lines = ["# GPU session summary", ""]
    env = _json(out / "environment.json") or {}
    if env:
        lines += ["## Environment", ""] + [f"- {k}: {v}" for k, v in env.items()] + [""]
    bench = _json(out / "BENCHMARKS.json")
    lines += ["## Benchmarks", ""]
    if bench:
        machine = bench["machine"]
        gpu = {k: v for k, v in machine.items() if k.startswith(("device", "gpu", "nvidia", "torch_cuda"))}
        lines += [f"- {k}: {v}" for k, v in gpu.items()]
        for result in bench["benchmarks"]:
            for target in result["targets"]:
                verdict = "met" if target["passed"] else "MISSED"
                lines.append(f"- {result['number']}. {target['name']}: {target['value']:.3g} ({verdict})")
            for key, value in result["data"].items():
                if key.endswith("_preset") and isinstance(value, dict) and "tokens_per_second" in value:
                    tps = value["tokens_per_second"]  # {dtype: {model: tok/s}} (1) or {variant: tok/s} (2)
                    nested = {k: per for k, per in tps.items() if isinstance(per, dict)}
                    pairs = [(f"{k}/{m}", v) for k, per in nested.items() for m, v in per.items()]
                    pairs += [(k, v) for k, v in tps.items() if isinstance(v, (int, float))]
                    flat = ", ".join(f"{name} {v:,.0f}" for name, v in pairs)
                    cost = value.get("cost")
                    extra = f"; cost {', '.join(f'{k} {100 * v:.1f} %' for k, v in cost.items())}" if cost else ""
                    lines.append(f"- {result['number']}. {key} tok/s: {flat}{extra}")
    else:
        lines.append("- not run (or failed): see logs")
    lines += ["", "## Distributed", ""]
    dist = _json(out / "distributed.json") or {}
    lines += [f"- {k}: {v}" for k, v in dist.items()] or ["- not run"]
    lines += ["", "## Training and evaluation", ""]
    train = _json(out / "train.json") or {}
    lines += [f"- {k}: {v}" for k, v in train.items()] or ["- not run"]
    release = _json(out / "release.json")
    if release:
        lines += ["", "## Release recipe", ""] + [f"- {k}: {v}" for k, v in release.items()]
    text = "\n".join(lines) + "\n"
    (out / "SUMMARY.md").write_text(text)
    return text


def note(path: Path, key: str, value: str) -> dict:
    """One more key in the JSON object file ``path``: ``value`` parsed as JSON where it is, else as text."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    try:
        data[key] = json.loads(value)
    except ValueError:
        data[key] = value
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def environment(path: Path, install: str, torch_version: str, pin: str, size: str, data: str) -> dict:
    """The setup stage's ``environment.json``: Python, torch and its pin, the GPU, the stack's versions."""
    import importlib.metadata as md
    import platform
    import subprocess

    import torch

    env = {
        "size": size,
        "python": platform.python_version(),
        "torch": torch_version,
        "torch_pin": pin,
        "torch_matches_pin": torch_version.split("+")[0] == pin,
        "torch_cuda": torch.version.cuda,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "bf16_supported": torch.cuda.is_bf16_supported() if torch.cuda.is_available() else None,
        "install": install,
        "data": data,
    }
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        smi = subprocess.run(query, capture_output=True, text=True, timeout=30)
        env["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.SubprocessError) as err:
        env["nvidia_smi"] = f"unavailable ({err})"
    for name in STACK_VERSIONS:
        try:
            env[name] = md.version(name)
        except md.PackageNotFoundError:
            env[name] = None
    path.write_text(json.dumps(env, indent=2) + "\n")
    return env


def history_facts(state: Path) -> tuple[dict, list[float]]:
    """From a run's ``trainer_state.json``: its updates and first and last logged loss, and its logged tokens/s."""
    saved = json.loads(state.read_text())
    history = saved["log_history"]
    losses = [h["loss"] for h in history if "loss" in h]
    facts = {"updates": saved["global_step"], "loss_first_last": [losses[0], losses[-1]] if losses else None}
    return facts, [h["tokens_per_second"] for h in history if "tokens_per_second" in h]


def dist_facts(path: Path, name: str, out: Path, rc: int, seconds: int, log: Path) -> dict:
    """The dist stage's record of one launcher run in ``distributed.json`` (under ``name``): exit, time, updates,
    losses, and which sharded checkpoints (FSDP, DeepSpeed) and log lines show the strategy really ran."""
    facts: dict = {"exit": rc, "seconds": seconds}
    state = out / "trainer_state.json"
    if state.is_file():
        history, tps = history_facts(state)
        facts.update(history, tokens_per_second_last=tps[-1] if tps else None)
    names = sorted({p.name for p in out.rglob("*")}) if out.is_dir() else []
    facts["checkpoints"] = sorted(n for n in names if n.startswith("checkpoint-"))
    facts["fsdp_sharded_files"] = [n for n in names if "fsdp" in n.lower()][:6]
    facts["deepspeed_files"] = [n for n in names if n.startswith("global_step") or "zero_pp" in n or n == "latest"][:6]
    facts["fsdp_active"] = bool(facts["fsdp_sharded_files"])  # SHARDED_STATE_DICT checkpoints: pytorch_model_fsdp_0
    facts["deepspeed_active"] = bool(facts["deepspeed_files"])  # DeepSpeed checkpoints: global_stepN/
    facts["saved_model"] = sorted(p.name for p in out.glob("*.safetensors")) if out.is_dir() else []
    text = log.read_text(errors="replace") if log.is_file() else ""
    facts["log_mentions"] = {key: key in text for key in LOG_MENTIONS}
    errors = [line for line in text.splitlines() if "Error" in line or "error:" in line]
    facts["last_error"] = errors[-1][:300] if errors else None
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[name] = facts
    path.write_text(json.dumps(data, indent=2) + "\n")
    return facts


def save_steps(bench: Path, train_minutes: float) -> int:
    """Updates between checkpoints for about 12 over the train stage, from the bench stage's small cT-LASER tokens/s
    (``BENCHMARKS.json``, benchmark 2); 250 without it."""
    try:
        result = next(r for r in json.loads(bench.read_text())["benchmarks"] if r["number"] == 2)
        tps = result["data"]["small_preset"]["tokens_per_second"]["pair/ctlaser"]
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return 250
    updates_per_minute = 0.7 * tps / 32000 * 60  # update_tokens of `small`; 0.7: the Trainer's overhead
    return max(25, int(updates_per_minute * train_minutes / 12))


def train_facts(path: Path, run: Path, results: Path) -> dict:
    """The finish stage's ``train.json``: the run's (or its last checkpoint's) updates, pairs, losses, time, median
    tokens/s, checkpoints and learning curve, and where its evaluation is."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    state = run / "trainer_state.json"
    if not state.is_file():
        found = [c / "trainer_state.json" for c in checkpoints(run) if (c / "trainer_state.json").is_file()]
        state = found[-1] if found else state
    if state.is_file():
        history, tps = history_facts(state)
        logged = json.loads(state.read_text())["log_history"]
        runtime = [h["train_runtime"] for h in logged if "train_runtime" in h]
        data.update(history, pairs_seen=int(sum(h.get("pairs", 0) for h in logged)))
        data["train_runtime_s"] = runtime[-1] if runtime else None
        data["tokens_per_second_median"] = sorted(tps)[len(tps) // 2] if tps else None
    data["checkpoints"] = len(checkpoints(run))
    curve = run / "curve.json"
    if curve.is_file():
        points = sorted(json.loads(curve.read_text())["points"].values(), key=lambda p: p["step"])
        data["curve"] = [{k: p[k] for k in ("step", "pairs", "ntrex_absolute", "sib_cross")} for p in points]
    if results.is_file():
        data["evaluate_results"] = str(results.relative_to(results.parents[1]))
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def checkpoints(run: Path) -> list[Path]:
    """A run's ``checkpoint-N`` folders, by N."""
    found = [p for p in run.glob("checkpoint-*") if p.name.split("-", 1)[1].isdigit()] if run.is_dir() else []
    return sorted(found, key=lambda p: int(p.name.split("-", 1)[1]))
