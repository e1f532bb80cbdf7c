"""One GPU lease, run-ready (``scripts/gpu_session.sh``): what travels, the session's stages, what comes back.

Here, before the lease (network):

    python scripts/gpu_session.py fetch-wheels .gpu_carry/wheels   # the pinned stack for the GPU machine's Python
    python scripts/gpu_session.py pack-data .gpu_carry/data        # the corpora the session reads, one .tar.xz
    python scripts/gpu_session.py carry-size .gpu_carry            # what travels vs the 64 MiB limit

On the GPU machine (no network), ``scripts/gpu_session.sh`` execs ``gpu_session.py run`` with its own command line
(``run --help``; ``Session``: setup, bench, dist, train, finish, release, levers, negatives). The session itself needs
only the standard library, so it runs before the setup stage's pip install; each command a stage launches runs
under ``$PYTHON`` (python3), bounded by a time limit and the call's deadline. Its records, also as commands:

    python scripts/gpu_session.py summary OUT                      # OUT/SUMMARY.md from the stages' results
    python scripts/gpu_session.py environment --output F ...       # setup: environment.json (run under $PYTHON)
    python scripts/gpu_session.py dist-facts F NAME RUN RC SECONDS LOG  # dist: one launcher run in distributed.json
    python scripts/gpu_session.py save-steps BENCHMARKS.json MINUTES   # train: updates between checkpoints
    python scripts/gpu_session.py train-facts F RUN RESULTS        # finish: train.json
    python scripts/gpu_session.py note F KEY VALUE                 # one more key in a JSON file

The GPU machine has its own Python (3.12) and torch (with CUDA) and many packages already (``IMAGE_PACKAGES``). The
whole pinned stack (constraints.txt) without torch is ~220 MiB of wheels, far over the 64 MiB that may travel, so
only these are carried: what the image lacks (datasets, evaluate, dill, multiprocess, pydantic and DeepSpeed's needs),
the core of the stack at its tested pins (``PINNED_ANYWAY``: transformers, huggingface-hub, sentence-transformers,
accelerate) and every pure-Python wheel under 1 MiB (their newer pins cost nothing); the big binary ones the image has
(pyarrow, scipy, numpy, pandas, ...) stay the image's, and ``SKIPPED`` (ruff, faiss-cpu: not needed there) stay home.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import gzip
import io
import json
import lzma
import os
import random
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, NoReturn

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from check_newest import canonical, read_pins  # noqa: E402  (the constraints file's reader, one for both scripts)

MIB = 2**20
CARRY = ".gpu_carry"
"""What travels to the device machine besides the tree (a carried path, relative to the repository root)."""
WHEEL_CACHE = Path.home() / ".cache" / "hf_tlaser" / "gpu_wheels"
CARRY_LIMIT_MIB = 64
"""The device tool's limit on the working tree that travels (tracked + untracked-not-ignored files + carried paths)."""
TARGET_PYTHON = "3.12"
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
NOT_CARRIED = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
"""torch is the GPU machine's own (a CUDA build); these come with it."""
IMAGE_PACKAGES = frozenset(
    """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
    charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
    cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax
    fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
    hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2
    joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
    markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
    mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
    nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver
    nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
    nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
    protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
    pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex
    requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
    sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate
    tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
    torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
    typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
    """.split()
)
"""Python packages on the GPU machines' image ('cuda'), as the device notes listed them on 2026-11-17 (Python 3.12.3,
torch 2.11.0+cu130, transformers 5.17.0, accelerate 1.15.0, sentence-transformers 6.0.1, numpy 2.5.2)."""
PINNED_ANYWAY = frozenset({"transformers", "huggingface-hub", "sentence-transformers", "accelerate"})
"""Carried at the tested pin although the image has a version (the code leans on their APIs)."""
SKIPPED = frozenset({"ruff", "faiss-cpu"})
"""Not carried (unless ``--all``): a linter, and faiss (18 MiB; kNN falls back to torch, on the GPU there)."""
SMALL_PURE_MIB = 1.0
DEEPSPEED_EXTRA = ("hjson",)
"""DeepSpeed's requirements that neither the image nor the stack has (pydantic comes with the stack)."""

# the corpora a session reads: the training mix (hf_tlaser.data.DEFAULT_TRAIN_CORPORA), NTREX-128 (retrieval, the
# benchmarks' texts) and SIB-200 (classification); Europarl is cut to what fits (the only large one)
DATA_FOLDERS = ("wmt-newstest-multiway", "multi30k", "wmt-newstest-bilingual", "stsb-multi-mt", "ntrex128", "sib200")
RELEASE_FOLDERS = ("wmt-newstest-more", "flores-devtest", "ud-pud", "tico19-test", "multilingual-e5-small")
"""What the release stage reads besides: the release recipe's last corpus, its dev sets and its pretrained start
(121 MiB: the archive then travels in parts, ``--release``)."""
EUROPARL = "europarl-v2-it-en"
EUROPARL_FILES = ("europarl.it-en.en.gz", "europarl.it-en.it.gz", "europarl.it-en.session.gz")

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


def log(message: str) -> None:
    print(f"[gpu_session] {message}", flush=True)


def tree_size(root: Path = ROOT) -> int:
    """Bytes of the working tree that travels without carried paths: tracked + untracked-not-ignored files."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    return sum((root / os.fsdecode(n)).stat().st_size for n in names if n and (root / os.fsdecode(n)).is_file())


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


# ---------------------------------------------------------------------------------------------------- wheels


def requirements() -> list[str]:
    """The package's dependencies and dev extras from pyproject.toml; torch and the package's own extras (the
    dev extra's ``hf_tlaser[openvino]``: CPU backends, of no use on the GPU machine) left out."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["dev"]
    left_out = {"torch", canonical(project["name"])}
    return [r for r in reqs if canonical(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]) not in left_out]


def target_flags(python_version: str) -> list[str]:
    flags = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        flags += ["--platform", platform]
    return flags


def pip(*args: str, quiet: bool = True) -> None:
    cmd = [sys.executable, "-m", "pip", *args] + (["-q"] if quiet else [])
    done = subprocess.run(cmd, text=True, capture_output=True)
    if done.returncode != 0:
        sys.exit(f"{done.stdout}\n{done.stderr}\n[gpu_session] failed: {' '.join(cmd)}")


def resolve(pins: dict[str, str], python_version: str) -> dict[str, tuple[str, str]]:
    """The stack's closure for the GPU machine's Python: canonical name -> (version, wheel file name)."""
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp, "constraints.txt")
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in pins.items() if n != "torch"))
        reqs = Path(tmp, "requirements.txt")
        reqs.write_text("\n".join(requirements()) + "\n")
        report = Path(tmp, "report.json")
        pip(
            "install",
            "--dry-run",
            "--ignore-installed",
            "--report",
            str(report),
            "--target",
            str(Path(tmp, "target")),
            *target_flags(python_version),
            "-c",
            str(constraints),
            "-r",
            str(reqs),
        )
        items = json.loads(report.read_text())["install"]
    return {
        canonical(i["metadata"]["name"]): (i["metadata"]["version"], i["download_info"]["url"].rsplit("/", 1)[-1])
        for i in items
    }


def is_pure(wheel: str) -> bool:
    return wheel.endswith("-none-any.whl")


def is_carried(name: str, wheel: Path) -> bool:
    """Whether the default carry takes this wheel of the stack (see the module's docstring)."""
    if name in SKIPPED:
        return False
    small_pure = is_pure(wheel.name) and wheel.stat().st_size < SMALL_PURE_MIB * MIB
    return name in PINNED_ANYWAY or name not in IMAGE_PACKAGES or small_pure


def build_deepspeed(cache: Path, version: str | None) -> Path | None:
    """A DeepSpeed wheel built here from its sdist (no ops compiled: they build just in time there; it has no
    binary wheel on PyPI); None if it does not build."""
    spec = f"deepspeed=={version}" if version else "deepspeed"
    found = sorted(cache.glob("deepspeed-*.whl"))
    if found and (version is None or f"deepspeed-{version}-" in found[-1].name):
        return found[-1]
    env = {**os.environ, "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(cache), spec]
    done = subprocess.run(cmd, text=True, capture_output=True, env=env)
    if done.returncode != 0:
        log(f"DeepSpeed did not build here ({(done.stderr.strip().splitlines() or ['?'])[-1][:200]}); not carried")
        return None
    found = sorted(cache.glob("deepspeed-*.whl"))
    return found[-1] if found else None


def fetch_wheels(
    out: Path, constraints: Path, carry_all: bool, python_version: str, cache: Path, deepspeed: bool
) -> int:
    """Download the pinned stack's wheels for the GPU machine into ``cache``, copy the carried ones into ``out`` and
    print sizes: all of them, the carried ones, and what travels in all vs the limit."""
    pins = read_pins(constraints)
    if len(pins) < 5:
        log(f"warning: {constraints} pins only {', '.join(pins) or 'nothing'}: the rest resolves to the newest allowed")
    closure = {n: vw for n, vw in resolve(pins, python_version).items() if not NOT_CARRIED.match(n)}
    cache.mkdir(parents=True, exist_ok=True)
    missing = [f"{n}=={v}" for n, (v, wheel) in closure.items() if not (cache / wheel).is_file()]
    if missing:
        log(f"downloading {len(missing)} wheels for CPython {python_version} manylinux x86_64 into {cache}")
        pip("download", "--no-deps", *target_flags(python_version), "-d", str(cache), *missing)
    extra: dict[str, Path] = {}
    if deepspeed:
        for name in DEEPSPEED_EXTRA:
            if name not in closure:
                pip("download", "--no-deps", *target_flags(python_version), "-d", str(cache), name)
                extra[name] = sorted(cache.glob(f"{name}-*.whl"))[-1]
        built = build_deepspeed(cache, pins.get("deepspeed"))
        if built is not None:
            extra["deepspeed"] = built
    rows = []
    for name, (version, wheel) in sorted(closure.items()):
        path = cache / wheel
        rows.append((name, version, path, name in IMAGE_PACKAGES, carry_all or is_carried(name, path)))
    for name, path in extra.items():
        rows.append((name, path.name.split("-")[1], path, name in IMAGE_PACKAGES, True))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for _, _, path, _, carried in rows:
        if carried:
            shutil.copy2(path, out / path.name)
    total = sum(p.stat().st_size for _, _, p, _, _ in rows)
    carried_bytes = sum(p.stat().st_size for _, _, p, _, c in rows if c)
    print(f"\n{'package':<28} {'version':<14} {'MiB':>7}  on image  carried")
    for name, version, path, on_image, carried in sorted(rows, key=lambda r: -r[2].stat().st_size):
        mib = path.stat().st_size / MIB
        print(f"{name:<28} {version:<14} {mib:7.2f}  {'yes' if on_image else 'NO ':<8}  {'yes' if carried else '-'}")
    print(
        f"\nthe whole pinned stack without torch/triton/nvidia-*: {len(rows)} wheels, {total / MIB:.1f} MiB; carried "
        f"({'all' if carry_all else 'not on the image, the core pins, small pure-Python'}): {sum(r[4] for r in rows)} "
        f"wheels, "
        f"{carried_bytes / MIB:.1f} MiB in {out}"
    )
    carry_report(out.parent if out.parent != ROOT else out)
    return 0


def carry_report(carry: Path) -> int:
    """Print what travels: the tree, the carried folder and their sum against the limit."""
    tree = tree_size()
    carried = folder_size(carry)
    total = tree + carried
    over = (total - CARRY_LIMIT_MIB * MIB) / MIB
    verdict = "fits" if over <= 0 else f"TOO BIG by {over:.1f} MiB"
    print(
        f"travels: working tree {tree / MIB:.1f} MiB + {carry} {carried / MIB:.1f} MiB = {total / MIB:.1f} MiB of "
        f"{CARRY_LIMIT_MIB} MiB: {verdict}"
    )
    for path in sorted(carry.iterdir()) if carry.is_dir() else []:
        print(f"  {path.name}: {folder_size(path) / MIB if path.is_dir() else path.stat().st_size / MIB:.1f} MiB")
    return 0 if total <= CARRY_LIMIT_MIB * MIB else 1


# ---------------------------------------------------------------------------------------------------- data


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def _europarl_head(data_dir: Path, lines: int | None) -> dict[str, bytes]:
    """The first ``lines`` lines of each Europarl file, uncompressed (xz packs text better than gz inside it)."""
    out = {}
    for name in EUROPARL_FILES:
        with gzip.open(data_dir / EUROPARL / name, "rb") as handle:
            if lines is None:
                out[name.removesuffix(".gz")] = handle.read()
            else:
                out[name.removesuffix(".gz")] = b"".join(line for _, line in zip(range(lines), handle))
    return out


def pack_data(out: Path, data_dir: Path, budget_mib: float, folders: tuple[str, ...] = DATA_FOLDERS) -> int:
    """``out/data.tar.xz``: the session's corpora (``folders``), Europarl cut to its first N pairs so that the archive
    stays within ``budget_mib``; ``out/DATA.txt`` says what is in it."""
    out.mkdir(parents=True, exist_ok=True)
    archive = out / "data.tar.xz"
    budget = budget_mib * MIB
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp, "base.tar")
        with tarfile.open(base, "w") as tar:
            for folder in folders:
                tar.add(data_dir / folder, arcname=folder)
        base_xz = len(lzma.compress(base.read_bytes(), preset=6))
        log(f"{', '.join(folders)}: {base.stat().st_size / MIB:.1f} MiB, {base_xz / MIB:.1f} MiB as xz")
        sample_lines = 20_000
        sample = _europarl_head(data_dir, sample_lines)
        per_line = len(lzma.compress(b"".join(sample.values()), preset=6)) / sample_lines
        total_lines = sum(1 for _ in gzip.open(data_dir / EUROPARL / EUROPARL_FILES[2], "rb"))
        lines = int(min(total_lines, max(0, (budget - base_xz) * 0.97 / per_line)))
        while True:
            head = _europarl_head(data_dir, lines if lines < total_lines else None)
            with lzma.open(archive, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
                with tarfile.open(base) as src:
                    for member in src.getmembers():
                        tar.addfile(member, src.extractfile(member) if member.isfile() else None)
                for name, data in head.items():
                    _add_bytes(tar, f"{EUROPARL}/{name}", data)
                _add_bytes(tar, f"{EUROPARL}/PROVENANCE.md", (data_dir / EUROPARL / "PROVENANCE.md").read_bytes())
            if archive.stat().st_size <= budget or lines < 1000:
                break
            lines = int(lines * 0.9)
    note = (
        f"data.tar.xz ({archive.stat().st_size / MIB:.1f} MiB) from {data_dir}: {', '.join(folders)} whole; "
        f"{EUROPARL}: the first {lines:,} of {total_lines:,} pairs (uncompressed text in the archive).\n"
    )
    (out / "DATA.txt").write_text(note)
    log(note.strip())
    return 0


def split(archive: Path, carry: Path, beside: Path) -> int:
    """``carry/part1``, ``part2``, ...: ``archive`` in pieces that each travel in one call (the tree, 1 MiB to spare),
    part1 beside the folder ``beside`` (the wheels). On the machine, ``cat`` of the pieces in order restores it."""
    room = CARRY_LIMIT_MIB * MIB - tree_size() - MIB
    for old in carry.glob("part[0-9]*"):
        shutil.rmtree(old)
    with archive.open("rb") as handle:
        number, chunk = 1, room - folder_size(beside)
        while piece := handle.read(chunk):
            folder = carry / f"part{number}"
            folder.mkdir()
            (folder / f"{archive.name}.{number:02d}").write_bytes(piece)
            log(f"{folder}: {len(piece) / MIB:.1f} MiB")
            number, chunk = number + 1, room
    log(f"{number - 1} calls: part1 with {beside}, then one part each")
    return 0


# ---------------------------------------------------------------------------------------------------- summary


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


# ------------------------------------------------------------------------ the stages' records (on the GPU machine)


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


# ---------------------------------------------------------------------------------------------------- the session
# ``scripts/gpu_session.sh`` execs ``gpu_session.py run`` with its own command line: the stages below, each bounded by
# the call's deadline, their commands run with time limits, and the files that come back published into $OUT.

STAGES = ("setup", "bench", "dist", "train", "finish", "release", "levers", "negatives")
ALL_STAGES = ("setup", "bench", "dist", "train", "finish")
"""What ``--stage all`` (the default) runs."""
PUBLISHED = (
    "SUMMARY.md",
    "BENCHMARKS.md",
    "BENCHMARKS.json",
    "environment.json",
    "learning_curve.md",
    "learning_curve.png",
)
"""The results copied into $OUT as they are; with ``ARCHIVES``, every file a session publishes."""
ARCHIVES = ("results.tar.gz", "logs.tar.gz")
OUT_FILES_MAX = 8
OUT_FILE_LIMIT = 16 * MIB
"""What comes back from the device machine: at most 8 flat files, each under 16 MiB."""
RELEASE_RESULTS = ("README.md", "trainer_state.json", "train_log.jsonl", "hf_tlaser_train.json", "eval/results.json")
LEVER_RESULTS = ("results.json", "train_log.jsonl", "hf_tlaser_train.json")
PUBLISH_SECONDS = 20
"""What every limited command leaves of the call for publishing."""
STAGE_SECONDS = 30
"""A stage starts only with more than this left in the call."""
KILL_AFTER = 10
"""Seconds between SIGTERM and SIGKILL of a command over its limit (``timeout --kill-after``)."""
NO_LIMIT = 10**9
PIP_ARGS = ("-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation", "--disable-pip-version-check")
CURVE_EVERY = 20
"""Seconds between the checkpoint evaluator's passes beside the detached run."""
TINY_CUTS = {"train.tsv": 141, "dev.tsv": 31}
"""Lines kept of SIB-200's files in the tiny corpora (header included; the other files: ``TINY_SIB_LINES``)."""
TINY_SIB_LINES = 71
TINY_NTREX_LINES = 300
ENVIRONMENT = {
    "PYTHONUNBUFFERED": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


class Profile(NamedTuple):
    """What ``--size`` sets: the device, the commands' sizes and time limits (seconds), the default deadline."""

    device: str
    bench_size: str
    python: str
    train_minutes: str
    finish_reserve: int
    bench_limit: int
    bench_presets: tuple[str, ...]
    dist_args: tuple[str, ...]
    dist_procs: int
    dist_limit: int
    train_args: tuple[str, ...]
    save_steps: str | None
    eval_args: tuple[str, ...]
    finish_eval_limit: int
    release_args: tuple[str, ...]
    release_train: tuple[str, ...]
    lever_updates: int
    lever_eval: tuple[str, ...]
    neg_updates: int
    neg_long: int
    neg_big: int
    neg_acc: int
    neg_mid: int
    neg_reserve: int
    deadline_minutes: float


PROFILES = {
    "full": Profile(
        device="cuda",
        bench_size="full",
        python="python3",
        train_minutes="10",
        finish_reserve=180,  # seconds the finish stage keeps for the evaluations
        bench_limit=480,
        bench_presets=("small", "paper"),
        dist_args=(
            *("--preset", "small", "--max-steps", "300", "--save-steps", "150", "--max-minutes", "1.5"),
            *("--max-lines", "30000", "--vocab-size", "8000", "--logging-steps", "25"),
        ),
        dist_procs=1,
        dist_limit=150,
        train_args=("--preset", "small", "--max-steps", "1000000"),
        save_steps=None,  # from the bench stage's tokens/s (save_steps)
        eval_args=("--seeds", "0", "1", "2"),
        finish_eval_limit=240,
        release_args=(),  # the recipe as it is: 2,000 updates, the dev sets, SIB-200 seeds 0 1 2
        release_train=(),
        lever_updates=500,
        lever_eval=("--seeds", "0"),
        neg_updates=200,
        neg_long=2000,
        neg_big=32000,
        neg_acc=4000,
        neg_mid=8000,
        neg_reserve=360,  # s: data ~170, evaluation ~180
        deadline_minutes=9.5,
    ),
    "tiny": Profile(
        device="cpu",
        bench_size="smoke",
        python="python",
        train_minutes="1",
        finish_reserve=120,
        bench_limit=600,  # a shared 2-core machine: 15 s idle, minutes when busy
        bench_presets=("small",),  # shrunk at smoke size: `paper` would run the same code on the same shapes again
        dist_args=(
            *("--preset", "tiny", "--max-steps", "4", "--save-steps", "2", "--max-lines", "300"),
            *("--vocab-size", "500", "--logging-steps", "1"),
        ),
        dist_procs=2,  # gloo: accelerate runs DDP on a CPU whatever the config (FSDP needs a GPU)
        dist_limit=180,
        train_args=("--preset", "tiny", "--max-steps", "6", "--max-lines", "2000", "--vocab-size", "1000"),
        save_steps="3",  # curve points: random init, update 3, update 6
        eval_args=("--seeds", "0", "--epochs", "20", "--projection", "none"),
        finish_eval_limit=300,
        release_args=("--updates", "4", "--seeds", "0", "--epochs", "5", "--retrieval-sets", "ntrex128"),
        release_train=("--save-steps", "2"),
        lever_updates=2,
        lever_eval=("--seeds", "0", "--epochs", "5"),
        neg_updates=2,
        neg_long=4,
        neg_big=2000,
        neg_acc=500,
        neg_mid=1000,
        neg_reserve=600,
        deadline_minutes=30,
    ),
}
"""--size full: CUDA on the GPU machine, the real sizes; --size tiny: the whole session on a CPU in minutes."""


class Clock:
    """The call's time: started now, ``minutes`` to its deadline, whole seconds as ``date +%s`` counts them."""

    def __init__(self, minutes: float, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.start = int(now())
        self.deadline = self.start + int(minutes * 60)

    def elapsed(self) -> int:
        return int(self.now()) - self.start

    def left(self) -> int:
        """Seconds left in this call."""
        return self.deadline - int(self.now())

    def cap(self, seconds: int) -> int:
        """A command's limit: ``seconds``, at most what the call has left less the time to publish."""
        return min(seconds, self.left() - PUBLISH_SECONDS)


def stage_list(stages: str) -> list[str]:
    """``--stage``'s comma-separated list, ``all`` for ``ALL_STAGES``."""
    return list(ALL_STAGES) if stages == "all" else stages.split(",")


def work_dir(size: str, environ: Mapping[str, str]) -> Path:
    """Where a session keeps its runs, results and logs (they survive between calls while the machine stays warm)."""
    if environ.get("HF_TLASER_GPU_WORK"):
        return Path(environ["HF_TLASER_GPU_WORK"])
    if size == "full":
        return Path("/tmp/hf_tlaser_gpu")
    return Path(environ.get("TMPDIR") or "/tmp") / "hf_tlaser_gpu_tiny"


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it: 128 + the signal for one killed by a signal."""
    return 128 - returncode if returncode < 0 else returncode


def last_lines(text: str, count: int, width: int, pattern: str | None = None) -> list[str]:
    """The last ``count`` non-blank lines of a log (progress bars' carriage returns as line ends), matching
    ``pattern`` where given, each cut to ``width`` characters."""
    lines = [line for line in text.replace("\r", "\n").split("\n") if line.strip()]
    if pattern is not None:
        lines = [line for line in lines if re.search(pattern, line)]
    return [line[:width] for line in lines[-count:]] if count else []


def read_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (``kill -0``; a child of this process that has ended is reaped, and a
    zombie counts as ended)."""
    if pid <= 0:
        return False
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def signal_group(pid: int, sig: int) -> None:
    """``kill -SIG -- -PID``: the process group that ``pid`` leads (never this session's own: no pid, 0 or 1)."""
    if pid <= 1:
        return
    with contextlib.suppress(OSError):
        os.killpg(pid, sig)


def run_limited(
    cmd: Sequence[str | Path], log: Path, seconds: int, env: Mapping[str, str] | None = None, append: bool = True
) -> int:
    """``timeout --kill-after=10 SECONDS CMD >>LOG 2>&1``: CMD in its own process group, its output in ``log``,
    the group stopped (SIGTERM, then SIGKILL) after ``seconds``; CMD's exit status, 124 when it was stopped (137 when
    it had to be killed)."""
    with log.open("ab" if append else "wb") as out:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
            process_group=0,
        )
        try:
            return exit_status(proc.wait(timeout=seconds))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_AFTER)
                return 124
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
                return 137
        except BaseException:
            signal_group(proc.pid, signal.SIGKILL)
            raise


def detach(cmd: Sequence[str | Path], log: Path | None, pid_file: Path) -> int:
    """``setsid nohup CMD >LOG 2>&1 &``: CMD in a session of its own that outlives this call; its pid in
    ``pid_file`` (also its process group's)."""
    with log.open("wb") if log is not None else open(os.devnull, "wb") as out:
        proc = subprocess.Popen(
            ["nohup", *(str(c) for c in cmd)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def curve_evaluator(pid: int, python: str, run: Path, log: Path) -> int:
    """Beside the detached run ``pid``: its checkpoints evaluated every ``CURVE_EVERY`` s while it trains (the
    learning curve grows)."""
    while alive(pid):
        time.sleep(CURVE_EVERY)
        with log.open("ab") as out:
            subprocess.run([python, "scripts/learning_curve.py", "evaluate", str(run)], stdout=out, stderr=out)
    return 0


def progress(train_log: Path, run: Path) -> str:
    """The run's last logged loss, throughput, pairs and epoch, and its checkpoints so far."""
    updates = re.findall(r"\{'loss'[^}\n]*\}", read_log(train_log))
    keys = re.findall(r"'(loss|tokens_per_second|pairs|epoch)': '?([0-9.e+-]*)", updates[-1]) if updates else []
    last = " ".join(f"{key}: {value}" for key, value in keys) or "no update logged yet"
    return f"{last} | checkpoints: {len(checkpoints(run))}"


def checkpoints(run: Path) -> list[Path]:
    """A run's ``checkpoint-N`` folders, by N."""
    found = [p for p in run.glob("checkpoint-*") if p.name.split("-", 1)[1].isdigit()] if run.is_dir() else []
    return sorted(found, key=lambda p: int(p.name.split("-", 1)[1]))


def torch_pin(constraints: Path) -> str:
    """The torch version constraints.txt pins ('' when none)."""
    return re.split(r"[ ;]", read_pins(constraints).get("torch", ""), maxsplit=1)[0]


def make_tiny_data(source: Path, dest: Path) -> None:
    """A copy of the corpora with NTREX-128 and SIB-200 cut to their first lines (every evaluation then takes seconds
    on a CPU), the other folders linked whole."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for folder in sorted(p for p in source.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name in ("ntrex128", "sib200"):
            shutil.copytree(folder, dest / folder.name)
            for path in [dest / folder.name, *(dest / folder.name).rglob("*")]:  # chmod -R u+w: the cuts, a rm -r
                path.chmod(path.stat().st_mode | 0o200)
        else:
            (dest / folder.name).symlink_to(folder)
    cuts = {}
    if (dest / "ntrex128").is_dir():
        for path in [*(dest / "ntrex128").glob("*.txt"), dest / "ntrex128" / "DOCUMENT_IDS.tsv"]:
            cuts[path] = TINY_NTREX_LINES
    for path in (dest / "sib200").glob("*/*.tsv"):
        cuts[path] = TINY_CUTS.get(path.name, TINY_SIB_LINES)
    for path, lines in cuts.items():
        if path.is_file():
            with path.open("rb") as handle:
                head = b"".join(line for _, line in zip(range(lines), handle))
            path.write_bytes(head)
    (dest / ".made").touch()


def accelerate_command(python: str, profile: Profile, launcher: Sequence[str], precision: str, out: Path) -> list[str]:
    """The dist stage's ``accelerate launch`` of the training CLI with one launcher config."""
    mixed = "no" if precision == "fp32" else precision
    return [
        *(python, "-m", "accelerate.commands.launch", *launcher, "--num_processes", str(profile.dist_procs)),
        *("--num_machines", "1", "--mixed_precision", mixed, "--dynamo_backend", "no", "-m", "hf_tlaser.training.cli"),
        *("--model", "ctlaser", *profile.dist_args, "--precision", precision, "--output-dir", str(out)),
    ]


def launcher_env(procs: int, port: int) -> dict[str, str]:
    """The dist run's environment: one process gets the rank variables, so that accelerate sets up the process group
    (and so FSDP / DeepSpeed) even where it starts the script directly; a launcher that starts ranks sets its own."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if procs == 1:
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    return env


def negative_runs(profile: Profile, stop: str) -> list[tuple[str, int, list[str]]]:
    """Issue 53's six runs, each (name, updates, training flags), side by side from the start: ``plain`` the recipe's
    1,000 tokens; ``big`` one micro-batch of ``neg_big`` tokens per update; ``acc`` the same pairs per update in
    micro-batches of ``neg_acc`` tokens; ``mid`` one micro-batch of ``neg_mid``; and at the release recipe's tokens
    (``neg_long`` updates of 1,000), the recipe itself and the big batch's updates. Each stops training after
    ``stop`` minutes at the latest (the safety stop)."""
    big = ["--max-tokens", str(profile.neg_big), "--update-tokens", str(profile.neg_big)]
    cut = ["--max-minutes", stop]
    return [
        ("plain", profile.neg_updates, cut),
        ("big", profile.neg_updates, cut + big),
        ("acc", profile.neg_updates, cut + ["--max-tokens", str(profile.neg_acc), "--update-tokens", big[3]]),
        (
            "mid",
            profile.neg_updates,
            cut + ["--max-tokens", str(profile.neg_mid), "--update-tokens", str(profile.neg_mid)],
        ),
        ("plain-long", profile.neg_long, cut),
        ("big-long", profile.neg_long * 1000 // profile.neg_big, cut + big),
    ]


def lever_runs(profile: Profile, start: Path) -> list[tuple[str, int, list[str]]]:
    """The release curve's levers at ``lever_updates``: twice the batch at equal tokens (half the updates), and
    self-distillation toward the start at weights 100 and 1000."""
    updates = profile.lever_updates
    return [
        ("batch2x", updates // 2, ["--update-tokens", "2000"]),
        ("distill100", updates, ["--teacher", str(start), "--distill-weight", "100"]),
        ("distill1000", updates, ["--teacher", str(start), "--distill-weight", "1000"]),
    ]


def negatives_stop(left: int, reserve: int) -> str:
    """The negatives' training limit in minutes (one decimal, at least 0.5): what the call has left less the data's
    and the evaluation's ``reserve`` seconds."""
    minutes = (left - reserve) / 60
    return f"{max(0.5, minutes):.1f}"


def release_facts() -> tuple[str, list[str]]:
    """The release recipe's corpora and retrieval sets, read from scripts/release.py."""
    recipe = runpy.run_path(str(ROOT / "scripts" / "release.py"))
    return recipe["CORPORA"], list(recipe["RETRIEVAL_SETS"])


class Session:
    """One device call: its flags, profile, clock and folders; ``run()`` runs the stages and publishes."""

    def __init__(
        self, args: argparse.Namespace, environ: Mapping[str, str] = os.environ, now: Callable[[], float] = time.time
    ) -> None:
        self.size: str = args.size
        self.profile = PROFILES[args.size]
        self.stages = stage_list(args.stage)
        self.train_minutes: str = args.train_minutes or self.profile.train_minutes
        self.wait_minutes: float | None = args.wait_minutes
        self.save_steps: str | None = args.save_steps or self.profile.save_steps
        self.deadline_minutes: float = (
            self.profile.deadline_minutes if args.deadline_minutes is None else args.deadline_minutes
        )
        self.clock = Clock(self.deadline_minutes, now)
        self.python = environ.get("PYTHON") or self.profile.python
        self.out = Path(args.out or environ.get("OUT") or "runs/gpu_session")
        self.work = work_dir(args.size, environ)
        self.results = self.work / "results"
        self.logs = self.work / "logs"
        self.run_dir = self.work / "train" / "ctlaser-small"
        self.carry = Path(CARRY)
        self._precision: str | None = None

    # -------------------------------------------------------------------------------- time, commands, publishing

    def say(self, message: str) -> None:
        print(f"[gpu_session {time.strftime('%H:%M:%S')} +{self.clock.elapsed()}s] {message}", flush=True)

    def limit(
        self,
        seconds: int,
        log: Path,
        cmd: Sequence[str | Path],
        env: Mapping[str, str] | None = None,
        append: bool = True,
        quiet: bool = False,
    ) -> int:
        """CMD with its output in ``log``, stopped after ``seconds`` capped by the deadline (keeping
        ``PUBLISH_SECONDS`` to publish); its exit status, 124 when stopped or not started for want of time."""
        seconds = self.clock.cap(seconds)
        words = " ".join(str(c) for c in cmd)
        if seconds <= 5:
            self.say(f"no time left for: {words}")
            with log.open("a") as handle:
                handle.write(f"no time left for: {words}\n")
            return 124
        if not quiet:
            self.say(f"$ {words} (limit {seconds}s, log {log})")
        rc = run_limited(cmd, log, seconds, env=env, append=append)
        if not quiet:
            for line in last_lines(read_log(log), 3, 240):
                print(line, flush=True)
        return rc

    def probe(self, code: str) -> str | None:
        """``$PY -c CODE``'s output, None when it fails."""
        try:
            done = subprocess.run([self.python, "-c", code], capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    def precision(self) -> str:
        """fp32 on a CPU, else bf16 where the GPU has it, fp16 where not."""
        if self._precision is None:
            if self.profile.device == "cpu":
                self._precision = "fp32"
            else:
                code = 'import torch; print("bf16" if torch.cuda.is_bf16_supported() else "fp16")'
                self._precision = self.probe(code) or "fp16"
        return self._precision

    def note(self, name: str, key: str, value: str) -> None:
        note(self.results / name, key, value)

    def data(self) -> Path:
        return Path(os.environ["HF_TLASER_DATA"])

    def result_paths(self) -> list[str]:
        """What results.tar.gz holds, relative to the work folder: the stages' records, the run's curve, the
        evaluation, the release run's and the levers' results."""
        names = [f"results/{f}" for f in ("distributed.json", "train.json") if (self.results / f).is_file()]
        if (self.run_dir / "curve.json").is_file():
            names.append(str((self.run_dir / "curve.json").relative_to(self.work)))
        if (self.work / "eval").is_dir():
            names.append("eval")
        if (self.results / "release.json").is_file():
            names.append("results/release.json")
        names += [f"release/{f}" for f in RELEASE_RESULTS if (self.work / "release" / f).is_file()]
        for f in LEVER_RESULTS:
            names += [str(p.relative_to(self.work)) for p in sorted(self.work.glob(f"levers/*/{f}")) if p.is_file()]
        return names

    def publish(self) -> list[Path]:
        """At most ``OUT_FILES_MAX`` flat files into $OUT, each under ``OUT_FILE_LIMIT``: SUMMARY.md (written now) and
        the stages' results as they are, results.tar.gz and logs.tar.gz. The files published."""
        with (self.logs / "publish.log").open("a") as handle:
            try:
                summary(self.results)
            except Exception:  # (a summary that fails must not stop the session)
                handle.write(traceback.format_exc())
                self.say("summary failed (see logs)")
        published = []
        for name in PUBLISHED:
            if (self.results / name).is_file():
                shutil.copy(self.results / name, self.out / name)
                published.append(self.out / name)
        extra = self.result_paths()
        archives = {"results.tar.gz": extra, "logs.tar.gz": ["logs"]}
        for archive, names in archives.items():
            if names:
                try:
                    with tarfile.open(self.out / archive, "w:gz") as tar:
                        for name in names:
                            tar.add(self.work / name, arcname=name)
                    published.append(self.out / archive)
                except OSError as err:  # a file that changed while read (a detached run's log, say)
                    self.say(f"WARNING: {archive} failed ({err})")
        files = sorted(p for p in self.out.iterdir() if p.is_file())
        for path in files:
            if path.stat().st_size > OUT_FILE_LIMIT:
                self.say(f"WARNING: {path} is over {OUT_FILE_LIMIT // MIB} MiB and will not come back")
        if len(files) > OUT_FILES_MAX:
            self.say(f"WARNING: {len(files)} files in {self.out}, more than the {OUT_FILES_MAX} that come back")
        self.say(f"published {len(files)} files into {self.out}")
        return published

    # -------------------------------------------------------------------------------------------------- stages

    def stage_setup(self) -> None:
        """torch checked (the machine's own CUDA build vs the pin), the carried wheels installed (full), the corpora
        unpacked (HF_TLASER_DATA), environment.json. Done once per machine (a marker in the work folder)."""
        found = self.probe("import torch; print(torch.__version__, torch.cuda.is_available())")
        if found is None:
            die(f"no torch in {self.python}: the GPU machine's python3 has it; set PYTHON")
        torch_version, cuda = found.split()[-2:]
        pin = torch_pin(ROOT / "constraints.txt")
        self.say(f"torch {torch_version} here (constraints.txt pins {pin}); cuda available: {cuda}")
        if self.size == "full" and cuda != "True":
            die("--size full needs CUDA and torch sees none (use --size tiny on a CPU)")
        marker = self.work / ".setup_done"
        install = "not run"
        setup_log = self.logs / "setup.log"
        if marker.is_file():
            self.say(f"setup: already done on this machine ({marker.read_text().strip()})")
        elif self.size == "tiny":
            install = "skipped: --size tiny installs nothing into this shared environment"
            pip_there = f"{self.python} -m pip install --no-index --no-deps {self.carry}/wheels/*.whl, then -e ."
            self.say(f"setup: {install}; on the GPU machine: {pip_there}")
        else:
            if not (self.carry / "wheels").is_dir():
                die(
                    f"no {self.carry}/wheels: run scripts/gpu_session.sh --prepare here and name {self.carry} in the "
                    "call's carry"
                )
            # the carried wheels as they are (each at its constraints.txt pin), without a resolver: faiss-cpu, a core
            # dependency, stays home (SKIPPED), so pip could never resolve hf_tlaser's requirements here; the image
            # has the rest (seen on an H100 machine, 2026-11-26), and the import check below says if that changes
            wheels = sorted(str(p) for p in (self.carry / "wheels").glob("*.whl"))
            pip_cmd = [self.python, *PIP_ARGS]
            if (
                self.limit(240, setup_log, pip_cmd + wheels) == 0
                and self.limit(120, setup_log, pip_cmd + ["-e", "."]) == 0
            ):
                install = "carried wheels at their constraints.txt pins (--no-deps), the image's versions of the rest"
            else:
                errors = [line for line in read_log(setup_log).splitlines() if "ERROR" in line]
                die(f"pip install failed (logs in {setup_log}): {errors[-1] if errors else ''}")
            self.say(f"setup: installed ({install})")
        archive = self.carry / "data" / "data.tar.xz"
        if archive.is_file():  # the corpora: the carried archive if any, else this machine's data dir
            unpacked = self.work / "data"
            if not (unpacked / ".unpacked").is_file():
                shutil.rmtree(unpacked, ignore_errors=True)
                unpacked.mkdir(parents=True)
                if subprocess.run(["tar", "-xJf", str(archive), "-C", str(unpacked)]).returncode != 0:
                    die(f"cannot unpack {archive}")
                (unpacked / ".unpacked").touch()
            os.environ["HF_TLASER_DATA"] = str(unpacked)
            about = read_log(self.carry / "data" / "DATA.txt").strip() or str(archive)
            self.say(f"corpora: {about} -> {unpacked}")
        else:
            if "HF_TLASER_DATA" not in os.environ:
                found = self.probe("from hf_tlaser.data.paths import get_data_dir; print(get_data_dir())")
                if not found:
                    die(f"no corpora: no {archive} (scripts/gpu_session.sh --pack-data) and no data dir here")
                os.environ["HF_TLASER_DATA"] = found
            self.say(f"corpora: {os.environ['HF_TLASER_DATA']} (no carried archive)")
        if self.size == "tiny":
            tiny = self.work / "tiny-data"
            if not (tiny / ".made").is_file():
                make_tiny_data(self.data(), tiny)
            os.environ["HF_TLASER_DATA"] = str(tiny)
            self.say(f"corpora (tiny): {tiny}, NTREX-128 cut to 300 lines, SIB-200 to 140/30/70 per language")
        env_cmd = [
            self.python,
            "scripts/gpu_session.py",
            "environment",
            "--output",
            str(self.results / "environment.json"),
        ]
        env_cmd += [install, torch_version, pin, self.size, str(self.data())]
        with setup_log.open("a") as err:
            if subprocess.run(env_cmd, stderr=err).returncode != 0:
                self.say("environment.json failed")
            imports = "import hf_tlaser, transformers, datasets, sentence_transformers"
            if subprocess.run([self.python, "-c", imports], stderr=err).returncode != 0:
                die("hf_tlaser does not import after setup (logs/setup.log)")
        if not marker.is_file():
            marker.write_text(f"torch {torch_version}; {install}\n")

    def bench_command(self) -> list[str]:
        p = self.profile
        return [
            *(self.python, "-m", "benchmarks", "--size", p.bench_size, "--only", "1", "2", "3", "--device", p.device),
            *("--presets", *p.bench_presets, "--output", str(self.results / "BENCHMARKS.md")),
        ]

    def stage_bench(self) -> None:
        """The paper's speed claims on this device (python -m benchmarks --only 1 2 3)."""
        rc = self.limit(self.profile.bench_limit, self.logs / "bench.log", self.bench_command())
        self.say("bench: done" if rc == 0 else f"bench: FAILED (exit {rc}; logs/bench.log)")

    def dist_run(self, name: str, launcher: Sequence[str]) -> int:
        """One accelerate launch of the training CLI, its facts into distributed.json."""
        out = self.work / "dist" / name
        shutil.rmtree(out, ignore_errors=True)
        begin = time.monotonic()
        log = self.logs / f"dist-{name}.log"
        env = launcher_env(self.profile.dist_procs, 29500 + random.randrange(1000))
        rc = self.limit(
            self.profile.dist_limit,
            log,
            accelerate_command(self.python, self.profile, launcher, self.precision(), out),
            env=env,
        )
        facts = dist_facts(self.results / "distributed.json", name, out, rc, int(time.monotonic() - begin), log)
        print(f"{name}: {facts}", flush=True)
        return rc

    def stage_dist(self) -> None:
        """The FSDP config, then DeepSpeed ZeRO-2 where it imports: distributed.json says what ran."""
        (self.work / "dist").mkdir(parents=True, exist_ok=True)
        if self.dist_run("fsdp", ["--config_file", "docs/configs/accelerate_fsdp.yaml"]) == 0:
            self.say("dist: FSDP config ran")
        else:
            self.say("dist: FSDP run FAILED (logs/dist-fsdp.log)")
        if self.probe("import deepspeed") is not None:
            if (
                self.dist_run(
                    "deepspeed", ["--use_deepspeed", "--deepspeed_config_file", "docs/configs/deepspeed_zero2.json"]
                )
                == 0
            ):
                self.say("dist: DeepSpeed ZeRO-2 ran")
            else:
                self.say("dist: DeepSpeed ZeRO-2 run FAILED (logs/dist-deepspeed.log)")
        else:
            self.note("distributed.json", "deepspeed", '"skipped: deepspeed does not import here (not installed)"')
            self.say("dist: DeepSpeed skipped (does not import)")

    def train_command(self, steps: str) -> list[str]:
        """The train stage's run; --save-steps BEFORE the run folder: after it, argparse's REMAINDER takes it for
        hf-tlaser train, whose later default --save-steps 100 then wins."""
        return [
            *(self.python, "scripts/learning_curve.py", "train", "--save-steps", steps, str(self.run_dir), "--"),
            *("--model", "ctlaser", *self.profile.train_args, "--max-minutes", self.train_minutes),
            *("--precision", self.precision()),
        ]

    def stage_train(self) -> None:
        """A `small` cT-LASER for --train-minutes, detached, with a checkpoint evaluator and the TF-IDF line beside
        it; watched for --wait-minutes (default: until the deadline)."""
        pid = read_pid(self.work / "train.pid")
        if pid is not None and alive(pid):
            self.say(f"train: a run is already going (pid {pid}); watching it")
        else:
            steps = self.save_steps or str(save_steps(self.results / "BENCHMARKS.json", float(self.train_minutes)))
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir.parent.mkdir(parents=True, exist_ok=True)
            args = " ".join(self.profile.train_args)
            self.say(
                f"train: cT-LASER {args} for {self.train_minutes} minutes, a checkpoint every {steps} updates, detached"
            )
            pid = detach(self.train_command(steps), self.logs / "train.log", self.work / "train.pid")
            evaluator = [sys.executable, "scripts/gpu_session.py", "curve-evaluator", str(pid), self.python]
            detach([*evaluator, str(self.run_dir), str(self.logs / "curve.log")], None, self.work / "curve.pid")
            lexical = ["timeout", "900", self.python, "scripts/learning_curve.py", "lexical", "--output"]
            detach([*lexical, str(self.work / "lexical.json")], self.logs / "lexical.log", self.work / "lexical.pid")
            self.note("train.json", "started", json.dumps(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
            self.note("train.json", "train_minutes", self.train_minutes)
            self.note("train.json", "save_steps", steps)
        if not self.watch_run(self.wait_minutes, 30):
            self.say("train: the run goes on detached: send the next call AT ONCE (--stage finish)")

    def watch_run(self, minutes: float | None, reserve: int) -> bool:
        """Wait for the run, at most ``minutes`` (None: no limit) and until ``reserve`` seconds are left in the call;
        True when the run has ended, False when it still runs."""
        pid = read_pid(self.work / "train.pid") or 0
        until = int(self.clock.now()) + int((1000 if minutes is None else minutes) * 60)
        while alive(pid):
            if int(self.clock.now()) >= until or self.clock.left() <= reserve:
                self.say(f"train: still running (pid {pid}): {progress(self.logs / 'train.log', self.run_dir)}")
                return False
            time.sleep(15)
            self.say(f"train: {progress(self.logs / 'train.log', self.run_dir)}")
        last = last_lines(read_log(self.logs / "train.log"), 1, 200)
        self.say(f"train: the run has ended: {last[0] if last else ''}")
        return True

    def stage_finish(self) -> None:
        """Wait for the run (stopping it when it would eat into the evaluations' time), its last checkpoints
        evaluated, the learning curve and hf-tlaser evaluate; train.json."""
        if not (self.work / "train.pid").is_file():
            self.say(
                "finish: no run on this machine (it was given back since the train stage?): run --stage "
                "train,finish --train-minutes 5 --wait-minutes 7"
            )
            self.note("train.json", "finish", '"no run on this machine"')
            return
        pid = read_pid(self.work / "train.pid") or 0
        if not self.watch_run(None, self.profile.finish_reserve):
            self.say(
                "finish: the run would outlast the evaluations' time in this call; stopping it (its checkpoints count)"
            )
            signal_group(pid, signal.SIGTERM)
            time.sleep(10)
        curve_pid = read_pid(self.work / "curve.pid")
        if curve_pid is not None:
            signal_group(curve_pid, signal.SIGTERM)
        curve = [self.python, "scripts/learning_curve.py"]
        if self.limit(self.profile.finish_eval_limit, self.logs / "curve.log", [*curve, "evaluate", str(self.run_dir)]):
            self.say("finish: learning_curve evaluate FAILED or was cut (logs/curve.log)")
        lexical_pid = read_pid(self.work / "lexical.pid")
        waited = 0
        while lexical_pid is not None and alive(lexical_pid) and self.clock.left() > 60:
            if waited == 0:
                self.say("finish: waiting for the TF-IDF reference (logs/lexical.log)")
            time.sleep(5)
            waited += 5
        lexical = self.work / "lexical.json"
        if not (lexical.is_file() and lexical.stat().st_size > 0):
            self.limit(180, self.logs / "lexical.log", [*curve, "lexical", "--output", str(lexical)])
        report = [*curve, "report", str(self.run_dir), "--lexical", str(lexical)]
        if self.limit(60, self.logs / "curve.log", [*report, "--output", str(self.results / "learning_curve.md")]):
            self.say("finish: learning curve report FAILED (logs/curve.log)")
        model = self.run_dir
        if not (model / "config.json").is_file():
            found = checkpoints(self.run_dir)
            model = found[-1] if found else None
        if model is not None and (model / "config.json").is_file():
            shutil.rmtree(self.work / "eval", ignore_errors=True)
            evaluate = [self.python, "-m", "hf_tlaser.cli", "evaluate", str(model), "--suite", "retrieval", "sib200"]
            evaluate += [
                "--retrieval-sets",
                "ntrex128",
                "--output-dir",
                str(self.work / "eval"),
                *self.profile.eval_args,
            ]
            if self.limit(self.profile.finish_eval_limit, self.logs / "evaluate.log", evaluate):
                self.say("finish: hf-tlaser evaluate FAILED (logs/evaluate.log)")
        else:
            self.say(f"finish: no saved model or checkpoint in {self.run_dir}")
        try:
            train_facts(self.results / "train.json", self.run_dir, self.work / "eval" / "results.json")
        except Exception:  # (the record of a broken run must not stop the session)
            self.say("finish: train.json failed")
        self.say("finish: done")

    def release_command(self) -> list[str]:
        """scripts/release.py on this device; --save-total-limit after --: every 250-update checkpoint stays (the
        levers' plain point)."""
        out = self.work / "release"
        return [
            *(self.python, "scripts/release.py", "--output", str(out), "--data-dir", str(self.data())),
            *(*self.profile.release_args, "--", "--save-total-limit", "100", *self.profile.release_train),
        ]

    def stage_release(self) -> None:
        """The release recipe (scripts/release.py) on this device, timed: training, then the evaluation."""
        out = self.work / "release"
        start = time.monotonic()
        if not (self.data() / "multilingual-e5-small" / "config.json").is_file():
            self.say(f"release: no start in {self.data() / 'multilingual-e5-small'} (pack-data --release)")
            return
        if out.exists():
            self.say(f"release: {out} exists on this machine: release.py continues it (or evaluates it, if trained)")
        self.say(
            f"release: scripts/release.py {' '.join(self.profile.release_args)}, the recipe's checkpoints kept "
            "for the levers"
        )
        log = self.logs / "release.log"
        with log.open("wb") as handle:
            proc = subprocess.Popen(self.release_command(), stdout=handle, stderr=subprocess.STDOUT)
        trained = None
        while proc.poll() is None:
            if trained is None and (out / "trainer_state.json").is_file():
                trained = int(time.monotonic() - start)
                self.note("release.json", "train_seconds", str(trained))
                self.say(f"release: trained in {trained} s (data included); evaluating")
            if self.clock.left() <= 25:
                self.say("release: out of time; stopping it (started again, release.py evaluates the trained model)")
                proc.terminate()
                break
            time.sleep(5)
        self.note("release.json", "exit", str(exit_status(proc.wait())))
        self.note("release.json", "seconds", str(int(time.monotonic() - start)))
        self.note("release.json", "device", json.dumps(self.profile.device))
        for line in last_lines(read_log(log), 3, 10**6, r"^release:|Error"):
            print(line, flush=True)

    def lever_train_command(self, name: str, updates: int, args: Sequence[str], corpora: str) -> list[str]:
        """One warm-start run at the release recipe (from the start, its corpora), ``args`` what differs."""
        data = self.data()
        return [
            *("nice", "-n", "10", self.python, "-m", "hf_tlaser.cli", "train", "--model", "ctlaser", "--seed", "1"),
            *("--corpora", corpora, "--init-from", str(data / "multilingual-e5-small"), "--data-dir", str(data)),
            *("--max-steps", str(updates), "--save-steps", "1000000", "--output-dir", str(self.work / "levers" / name)),
            *args,
            *self.profile.release_train,
        ]

    def lever_eval_command(self, name: str, folder: Path, sets: Sequence[str]) -> list[str]:
        """The release recipe's retrieval sets, Multi30k test 2016 and SIB-200 (seed 0) of one lever's model."""
        data = self.data()
        m30k = data / "multi30k" / "task1-raw" / "test_2016_flickr"
        files = "files:" + ":".join(f"{lang}={m30k}.{lang}.gz" for lang in ("cs", "de", "en", "fr"))
        return [
            *("nice", "-n", "10", self.python, "-m", "hf_tlaser.cli", "evaluate", str(folder), "--suite", "retrieval"),
            *("sib200", "--data-dir", str(data), "--retrieval-sets", *sets, files, "--projection", "none"),
            *("--no-references", *self.profile.lever_eval, "--output-dir", str(self.work / "levers" / f"{name}-eval")),
        ]

    def lever_eval(self, name: str, folder: Path, sets: Sequence[str]) -> int:
        log = self.logs / f"lever-{name}.log"
        rc = self.limit(NO_LIMIT, log, self.lever_eval_command(name, folder, sets), quiet=True)
        tail = read_log(log)[-160:].replace("\r", " ").replace("\n", " ")
        self.say(f"lever {name}: exit {rc} ({tail})")
        return rc

    def lever(self, name: str, updates: int, args: Sequence[str], corpora: str, sets: Sequence[str]) -> int:
        """One lever run until the deadline, then its evaluation."""
        log = self.logs / f"lever-{name}.log"
        cmd = self.lever_train_command(name, updates, args, corpora)
        rc = self.limit(NO_LIMIT, log, cmd, append=False, quiet=True)
        if rc != 0:
            self.say(f"lever {name}: training exit {rc} (logs/lever-{name}.log)")
            return rc
        return self.lever_eval(name, self.work / "levers" / name, sets)

    def side_by_side(self, jobs: Sequence[Callable[[], object]]) -> None:
        """Run ``jobs`` at once (each starts its processes), and wait for all."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            for done in [pool.submit(job) for job in jobs]:
                error = done.exception()
                if error is not None:
                    self.say(f"a side-by-side run failed: {error!r}")

    def stage_levers(self) -> None:
        """The release curve's levers at ``lever_updates`` against the recipe's own checkpoint there, side by side."""
        corpora, sets = release_facts()
        (self.work / "levers").mkdir(parents=True, exist_ok=True)
        start = self.data() / "multilingual-e5-small"
        plain = self.work / "release" / f"checkpoint-{self.profile.lever_updates}"
        jobs: list[Callable[[], object]] = []
        if plain.is_dir():
            jobs.append(functools.partial(self.lever_eval, "plain", plain, sets))
        else:
            self.say(f"levers: no {plain} (run the release stage first)")
        for name, updates, args in lever_runs(self.profile, start):
            jobs.append(functools.partial(self.lever, name, updates, args, corpora, sets))
        self.side_by_side(jobs)

    def stage_negatives(self) -> None:
        """Issue 53: in-batch negatives side by side from the start (``negative_runs``); a run still training when
        only the data's and the evaluation's minutes are left stops and saves (the safety stop)."""
        stop = negatives_stop(self.clock.left(), self.profile.neg_reserve)
        corpora, sets = release_facts()
        (self.work / "levers").mkdir(parents=True, exist_ok=True)
        self.say(f"negatives: {self.profile.neg_updates} updates each, training stopped after {stop} min at the latest")
        runs = negative_runs(self.profile, stop)
        self.side_by_side([functools.partial(self.lever, n, u, a, corpora, sets) for n, u, a in runs])

    # ---------------------------------------------------------------------------------------------------- main

    def run_stages(self) -> None:
        """Setup, then each stage named in order while the call has time left, publishing after each."""
        self.stage_setup()
        for stage in self.stages:
            if stage == "setup":
                continue
            if stage not in STAGES:
                self.say(f"unknown stage {stage} ({', '.join(STAGES)}, all)")
                continue
            if self.clock.left() <= STAGE_SECONDS:
                self.say(f"no time left in this call for stage {stage}")
                continue
            self.say(f"=== stage {stage}")
            try:
                getattr(self, f"stage_{stage}")()
            except Exception:  # (a stage's bug must not cost the others or the publishing)
                with (self.logs / "gpu_session.log").open("a") as handle:
                    handle.write(traceback.format_exc())
                self.say(f"{stage}: FAILED ({sys.exc_info()[1]!r}; logs/gpu_session.log)")
            self.publish()

    def run(self) -> int:
        """The whole call: folders, environment, stages, the last publishing and the summary."""
        for folder in (self.results, self.logs, self.out):
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:
                die(f"cannot create {self.results}, {self.logs} or {self.out}")
        os.environ.update(ENVIRONMENT)
        self.say(
            f"size {self.size}, device {self.profile.device}, stages {','.join(self.stages)}, work {self.work}, "
            f"out {self.out}, deadline {self.deadline_minutes:g} min"
        )
        self.run_stages()
        self.publish()
        with contextlib.suppress(Exception):
            print("\n".join(summary(self.results).splitlines()[-40:]), flush=True)
        names = " ".join(sorted(p.name for p in self.out.iterdir() if p.is_file()))
        self.say(f"done in {self.clock.elapsed()} s; results in {self.out}: {names}")
        return 0


def die(message: str) -> NoReturn:
    """``gpu_session: MESSAGE`` on stderr, exit status 2."""
    print(f"gpu_session: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def exclude_carry() -> None:
    """The carried folder in .git/info/exclude: it travels as a carried path, not in the tree."""
    exclude = ROOT / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    if f"/{CARRY}/" not in lines:
        with exclude.open("a") as handle:
            handle.write(f"/{CARRY}/\n")


def prepare_steps(release: bool) -> list[list[str]]:
    """``--prepare``: the wheels, the corpora and what travels; ``--prepare-release``: the wheels without DeepSpeed,
    the release corpora and the archive in parts for three calls. Each step a ``gpu_session.py`` command line."""
    if not release:
        return [["fetch-wheels", f"{CARRY}/wheels"], ["pack-data", f"{CARRY}/data"], ["carry-size", CARRY]]
    return [
        ["fetch-wheels", f"{CARRY}/wheels", "--no-deepspeed"],
        ["pack-data", f"{CARRY}/release-data", "--release", "--budget-mib", "220"],
        ["split", f"{CARRY}/release-data/data.tar.xz", CARRY, "--beside", f"{CARRY}/wheels"],
    ]


def prepare(release: bool) -> int:
    """Here, before the lease: ``prepare_steps``, stopping at the first that fails."""
    exclude_carry()
    for step in prepare_steps(release):
        rc = main(step)
        if rc:
            return rc
    return 0


def usage() -> str:
    """The command line, as scripts/gpu_session.sh's header says it (its lines 2-9)."""
    lines = (ROOT / "scripts" / "gpu_session.sh").read_text().splitlines()[1:9]
    return "\n".join(re.sub(r"^# ?", "", line) for line in lines)


def minutes(value: str) -> str:
    """A number of minutes, kept as written (it goes into commands and train.json as it is)."""
    float(value)
    return value


def count(value: str) -> str:
    """A number of updates, kept as written."""
    int(value)
    return value


def session_parser() -> argparse.ArgumentParser:
    """scripts/gpu_session.sh's flags."""
    parser = argparse.ArgumentParser(prog="scripts/gpu_session.sh", add_help=False, usage="%(prog)s ... (see --help)")
    parser.add_argument("--size", choices=("tiny", "full"), default="full")
    parser.add_argument("--out", default=None, help="default $OUT when set, else runs/gpu_session")
    parser.add_argument("--stage", "--stages", dest="stage", default="all")
    parser.add_argument("--train-minutes", type=minutes, default=None)
    parser.add_argument("--wait-minutes", type=float, default=None)
    parser.add_argument("--save-steps", type=count, default=None)
    parser.add_argument("--deadline-minutes", type=float, default=None)
    parser.add_argument("--fetch-wheels", nargs="?", const=f"{CARRY}/wheels", default=None, metavar="DIR")
    parser.add_argument("--pack-data", nargs="?", const=f"{CARRY}/data", default=None, metavar="DIR")
    parser.add_argument("--prepare", action="store_true")
    parser.add_argument("--prepare-release", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def session(argv: list[str]) -> int:
    """scripts/gpu_session.sh's command line: the preparations here, or a device call's stages."""
    args = session_parser().parse_args(argv)
    os.chdir(ROOT)
    if args.help:
        print(usage())
        return 0
    if args.fetch_wheels is not None:
        return main(["fetch-wheels", args.fetch_wheels])
    if args.pack_data is not None:
        return main(["pack-data", args.pack_data])
    if args.prepare or args.prepare_release:
        return prepare(release=args.prepare_release)
    return Session(args).run()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # scripts/gpu_session.sh's own command line, parsed by session_parser
        return session(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="a device call's stages: scripts/gpu_session.sh's flags (run --help)")
    w = sub.add_parser("curve-evaluator", help="the train stage's checkpoint evaluator beside the detached run")
    w.add_argument("pid", type=int)
    w.add_argument("python")
    w.add_argument("run", type=Path)
    w.add_argument("log", type=Path)
    f = sub.add_parser("fetch-wheels", help="download the GPU machine's wheels of the pinned stack")
    f.add_argument("out", type=Path, nargs="?", default=ROOT / ".gpu_carry" / "wheels")
    f.add_argument("--constraints", type=Path, default=ROOT / "constraints.txt")
    f.add_argument("--all", action="store_true", help="carry every wheel (default: see the module's docstring)")
    f.add_argument("--python-version", default=TARGET_PYTHON)
    f.add_argument("--cache", type=Path, default=WHEEL_CACHE)
    f.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeed (built here from its sdist) out")
    d = sub.add_parser("pack-data", help="the session's corpora as one .tar.xz")
    d.add_argument("out", type=Path, nargs="?", default=ROOT / ".gpu_carry" / "data")
    d.add_argument("--data-dir", default=None)
    d.add_argument(
        "--budget-mib",
        type=float,
        default=None,
        help="size limit of the archive (default: what the 64 MiB leave after the tree, the rest of .gpu_carry and "
        "1 MiB to spare)",
    )
    d.add_argument(
        "--release",
        action="store_true",
        help="also what the release stage reads (RELEASE_FOLDERS, the start included); give --budget-mib, then split "
        "the archive into parts that travel in successive calls (scripts/gpu_session.sh --help)",
    )
    p = sub.add_parser("split", help="an archive in pieces, one per call (part1 beside the wheels)")
    p.add_argument("archive", type=Path)
    p.add_argument("carry", type=Path, nargs="?", default=ROOT / ".gpu_carry")
    p.add_argument("--beside", type=Path, default=ROOT / ".gpu_carry" / "wheels")
    c = sub.add_parser("carry-size", help="what travels vs the 64 MiB limit")
    c.add_argument("carry", type=Path, nargs="?", default=ROOT / ".gpu_carry")
    s = sub.add_parser("summary", help="OUT/SUMMARY.md from the stages' results")
    s.add_argument("out", type=Path)
    n = sub.add_parser("note", help="one more key in a JSON object file (VALUE as JSON where it is, else text)")
    n.add_argument("path", type=Path)
    n.add_argument("key")
    n.add_argument("value")
    e = sub.add_parser("environment", help="the setup stage's environment.json")
    for name in ("install", "torch_version", "pin", "size", "data"):
        e.add_argument(name)
    e.add_argument("--output", type=Path, required=True)
    r = sub.add_parser("dist-facts", help="one launcher run's record in distributed.json")
    r.add_argument("path", type=Path)
    r.add_argument("name")
    r.add_argument("out", type=Path)
    r.add_argument("rc", type=int)
    r.add_argument("seconds", type=int)
    r.add_argument("log", type=Path)
    v = sub.add_parser("save-steps", help="updates between the train stage's checkpoints (about 12 in all)")
    v.add_argument("bench", type=Path)
    v.add_argument("train_minutes", type=float)
    t = sub.add_parser("train-facts", help="the finish stage's train.json")
    t.add_argument("path", type=Path)
    t.add_argument("run", type=Path)
    t.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    if args.command == "curve-evaluator":
        return curve_evaluator(args.pid, args.python, args.run, args.log)
    if args.command == "note":
        note(args.path, args.key, args.value)
        return 0
    if args.command == "environment":
        environment(args.output, args.install, args.torch_version, args.pin, args.size, args.data)
        return 0
    if args.command == "dist-facts":
        print(f"{args.name}: {dist_facts(args.path, args.name, args.out, args.rc, args.seconds, args.log)}")
        return 0
    if args.command == "save-steps":
        print(save_steps(args.bench, args.train_minutes))
        return 0
    if args.command == "train-facts":
        train_facts(args.path, args.run, args.results)
        return 0
    if args.command == "fetch-wheels":
        deepspeed = not args.no_deepspeed
        return fetch_wheels(args.out, args.constraints, args.all, args.python_version, args.cache, deepspeed)
    if args.command == "pack-data":
        sys.path.insert(0, str(ROOT))
        from hf_tlaser.data.paths import get_data_dir

        budget = args.budget_mib
        if budget is None:
            others = sum(folder_size(p) for p in args.out.parent.glob("*") if p.resolve() != args.out.resolve())
            budget = (CARRY_LIMIT_MIB * MIB - tree_size() - others) / MIB - 1.0
            log(f"archive budget: {budget:.1f} MiB (64 MiB - tree - the rest of {args.out.parent} - 1 MiB)")
        folders = DATA_FOLDERS + RELEASE_FOLDERS if args.release else DATA_FOLDERS
        return pack_data(args.out, get_data_dir(args.data_dir), budget, folders)
    if args.command == "split":
        return split(args.archive, args.carry, args.beside)
    if args.command == "carry-size":
        return carry_report(args.carry)
    print(summary(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
