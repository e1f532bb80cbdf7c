"""The GPU machine's wheels of the pinned stack, fetched here (``gpu_session.py fetch-wheels``).

The GPU machine has its own Python (3.12) and torch (with CUDA) and many packages already (``IMAGE_PACKAGES``). The
whole pinned stack (constraints.txt) without torch is ~220 MiB of wheels, far over the 64 MiB that may travel, so
only these are carried: what the image lacks (datasets, evaluate, dill, multiprocess, pydantic and DeepSpeed's needs),
the core of the stack at its tested pins (``PINNED_ANYWAY``: transformers, huggingface-hub, sentence-transformers,
accelerate) and every pure-Python wheel under 1 MiB (their newer pins cost nothing); the big binary ones the image has
(pyarrow, scipy, numpy, pandas, ...) stay the image's, and ``SKIPPED`` (ruff, faiss-cpu: not needed there) stay home.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib
from check_newest import canonical, read_pins  # (the constraints file's reader, one for both scripts)

from .carry import MIB, ROOT, carry_report, log

WHEEL_CACHE = Path.home() / ".cache" / "hf_tlaser" / "gpu_wheels"

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
