"""``hf-tlaser push`` against an in-memory Hub (tests/hub_server.py), then loading by repo id in a fresh process
where hf_tlaser cannot be imported; ``online`` runs the same against the real Hub. Mistakes (repo id, folder, token,
unreachable Hub) end in one line, exit 2, before anything is written or sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest
import torch
from hub_server import HubServer
from transformers import AutoTokenizer

import hf_tlaser
from hf_tlaser import TLaserConfig, TLaserForTranslation, save_tokenizer
from hf_tlaser.hub import cli

TEXTS = ["Hello world.", "The economy grew by two percent last year.", ""]
LOAD_BY_REPO_ID = """
import json, sys
sys.modules["hf_tlaser"] = None  # the published repository must work without the package
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer, pipeline

repo, texts = sys.argv[1], json.loads(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(repo)
model = AutoModel.from_pretrained(repo, trust_remote_code=True).eval()
with torch.no_grad():
    out = model(**tokenizer(texts, padding=True, return_tensors="pt"))
st = SentenceTransformer(repo, trust_remote_code=True).encode(texts)
features = pipeline("feature-extraction", model=repo, trust_remote_code=True)(texts)
print("RESULT " + json.dumps({
    "transformers": out.pooler_output.tolist(),
    "sentence_transformers": st.tolist(),
    "pipeline_position_0": [f[0][0] for f in features],
}))
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer, tiny_tlaser_kwargs):
    """A trained-format folder: tiny TLaserForTranslation + the shared tiny BPE on real newstest lines."""
    config = TLaserConfig(**tiny_tlaser_kwargs)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-tlaser")
    TLaserForTranslation(config).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    (folder / "hf_tlaser_train.json").write_text(
        json.dumps({"args": {"corpora": "multi30k"}, "preset": "ctlaser-tiny"})
    )
    return folder


@pytest.fixture(scope="module")
def reference(model_dir):
    model = TLaserForTranslation.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return hf_tlaser.encode(model, tokenizer, TEXTS, autocast_dtype=None)  # fp32, as transformers runs it


@pytest.fixture()
def no_login(monkeypatch, tmp_path):
    """No HF_TOKEN and no cached login."""
    import huggingface_hub.constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))


def load_in_fresh_process(repo_id: str, endpoint: str, hf_home, token: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(hf_home), HF_TOKEN=token, HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", LOAD_BY_REPO_ID, repo_id, json.dumps(TEXTS)],
        env=env,
        cwd=hf_home,  # not the repository root: hf_tlaser must not be importable from there either
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT ", 1)[1])


def assert_matches(loaded: dict, reference: np.ndarray) -> None:
    for name, vectors in loaded.items():
        np.testing.assert_allclose(np.array(vectors), reference, atol=1e-5, err_msg=name)


def test_push_then_load_by_repo_id(model_dir, reference, tmp_path, monkeypatch, no_login):
    monkeypatch.setenv("HF_TOKEN", "dummy-token")
    with HubServer() as hub:
        argv = [str(model_dir), "tester/tiny-tlaser", "--endpoint", hub.url, "--commit-message", "first"]
        assert cli.main(argv) == 0
        repo = hub.repos["tester/tiny-tlaser"]
        files = repo.commits[repo.branches["main"]]
        for name in ("README.md", "modules.json", "1_Pooling/config.json", "modeling_tlaser.py", "model.safetensors"):
            assert name in files
        assert files["model.safetensors"] == (model_dir / "model.safetensors").read_bytes()
        first_commit = repo.branches["main"]

        assert b"Not evaluated yet" in files["README.md"]

        # evaluate, then push again: the repository is updated and the generated card shows the evaluation
        (model_dir / "eval").mkdir()
        (model_dir / "eval" / "results.json").write_text(json.dumps({"sib200": {"summary": {"cross": [51.0, 1.0]}}}))
        assert cli.main([str(model_dir), "tester/tiny-tlaser", "--endpoint", hub.url]) == 0
        assert repo.branches["main"] != first_commit
        files = repo.commits[repo.branches["main"]]
        assert "eval/results.json" in files and b"Not evaluated yet" not in files["README.md"]
        assert b"51.00 \xc2\xb1 1.00" in files["README.md"]  # "51.00 ± 1.00"

        hf_home = tmp_path / "hf_home"
        hf_home.mkdir()
        loaded = load_in_fresh_process("tester/tiny-tlaser", hub.url, hf_home, "dummy-token")
    assert_matches(loaded, reference)


def test_push_without_token_fails_before_any_request(model_dir, no_login, capsys):
    with HubServer() as hub:
        assert cli.main([str(model_dir), "tester/no-token", "--endpoint", hub.url]) == 2
        assert hub.requests == []
    assert "no Hugging Face token" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("repo_id", "folder", "expected"),
    [
        ("tiny-tlaser", "model", "REPO_ID 'tiny-tlaser' is not a repository id: use NAMESPACE/NAME"),
        ("tester/bad name", "model", "REPO_ID 'tester/bad name' is not valid"),
        ("tester/tiny", "missing", "does not exist"),
        ("tester/tiny", "empty", "is not a model folder (no config.json)"),
    ],
)
def test_push_validates_before_writing(repo_id, folder, expected, model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", "dummy-token")
    target = tmp_path / folder
    if folder == "model":
        shutil.copytree(model_dir, target, ignore=shutil.ignore_patterns("README.md", "eval"))
    elif folder == "empty":
        target.mkdir()
    before = sorted(p.name for p in target.iterdir()) if target.exists() else None
    with HubServer() as hub:
        assert cli.main([str(target), repo_id, "--endpoint", hub.url]) == 2
        assert hub.requests == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hf-tlaser push: error: ") and expected in err[0]
    assert (sorted(p.name for p in target.iterdir()) if target.exists() else None) == before


def test_push_to_unreachable_hub_is_one_line(model_dir, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(model_dir, target, ignore=shutil.ignore_patterns("README.md", "eval"))
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": "dummy-token"}
    command = [sys.executable, "-m", "hf_tlaser.cli", "push", str(target), "tester/tiny"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "hf-tlaser push: error: cannot reach the Hub at http://127.0.0.1:9 ([Errno 111] Connection refused); "
        "check --endpoint / HF_ENDPOINT and the network"
    ]
    assert not (target / "README.md").exists()  # nothing written before the Hub answered


def test_push_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "``" not in text and "(default: main)" in text and "NAMESPACE/NAME" in text


@pytest.mark.online
@pytest.mark.skipif(os.environ.get("HF_TLASER_ONLINE_TESTS") != "1", reason="set HF_TLASER_ONLINE_TESTS=1 to run")
def test_push_to_real_hub(model_dir, reference, tmp_path):
    from huggingface_hub import HfApi, get_token

    token = get_token()
    if not token:
        pytest.skip("no Hugging Face token")
    api = HfApi(token=token)
    repo_id = f"{api.whoami()['name']}/hf-tlaser-test-{uuid.uuid4().hex[:8]}"
    try:
        assert cli.main([str(model_dir), repo_id, "--private"]) == 0
        assert cli.main([str(model_dir), repo_id]) == 0
        hf_home = tmp_path / "hf_home"
        hf_home.mkdir()
        loaded = load_in_fresh_process(repo_id, api.endpoint, hf_home, token)
    finally:
        api.delete_repo(repo_id, missing_ok=True)
    assert_matches(loaded, reference)
