"""Helpers of ``scripts/gpu_session.sh`` (one GPU lease, run-ready): what travels, and what comes back.

Here, before the lease (network):

    python scripts/gpu_session.py fetch-wheels .gpu_carry/wheels   # the pinned stack for the GPU machine's Python
    python scripts/gpu_session.py pack-data .gpu_carry/data        # the corpora the session reads, one .tar.xz
    python scripts/gpu_session.py carry-size .gpu_carry            # what travels vs the 64 MiB limit

On the GPU machine (no network), called by the shell script, which keeps only what must be shell (the stages'
processes, time limits, detaching, the files that come back):

    python scripts/gpu_session.py summary OUT                      # OUT/SUMMARY.md from the stages' results
    python scripts/gpu_session.py environment --output F ...       # setup: environment.json
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
import gzip
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from check_newest import canonical, read_pins  # noqa: E402  (the constraints file's reader, one for both scripts)

MIB = 2**20
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
        found = sorted(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
        state = found[-1] if found else state
    if state.is_file():
        history, tps = history_facts(state)
        logged = json.loads(state.read_text())["log_history"]
        runtime = [h["train_runtime"] for h in logged if "train_runtime" in h]
        data.update(history, pairs_seen=int(sum(h.get("pairs", 0) for h in logged)))
        data["train_runtime_s"] = runtime[-1] if runtime else None
        data["tokens_per_second_median"] = sorted(tps)[len(tps) // 2] if tps else None
    data["checkpoints"] = len(list(run.glob("checkpoint-*")))
    curve = run / "curve.json"
    if curve.is_file():
        points = sorted(json.loads(curve.read_text())["points"].values(), key=lambda p: p["step"])
        data["curve"] = [{k: p[k] for k in ("step", "pairs", "ntrex_absolute", "sib_cross")} for p in points]
    if results.is_file():
        data["evaluate_results"] = str(results.relative_to(results.parents[1]))
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch-wheels", help="download the GPU machine's wheels of the pinned stack")
    f.add_argument("out", type=Path, nargs="?", default=ROOT / ".gpu_carry" / "wheels")
    f.add_argument("--constraints", type=Path, default=ROOT / "constraints.txt")
    f.add_argument("--all", action="store_true", help="carry every wheel (default: see the module's docstring)")
    f.add_argument("--python-version", default=TARGET_PYTHON)
    f.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "hf_tlaser" / "gpu_wheels")
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
