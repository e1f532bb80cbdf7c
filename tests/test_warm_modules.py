"""``--init-from`` a sentence-transformers folder with modules after pooling (Dense, Normalize, as LaBSE): they are
carried into the member and its saved folder, so that before training the warm-started model's vectors are the
start's in every route (``hf_tlaser.encode``, ``AutoModel`` and ``SentenceTransformer`` in a fresh process); a
module that cannot be carried is refused with one line. A tiny random XLM-R backbone is built here (no downloads)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel, PreTrainedTokenizerFast

import hf_tlaser
from hf_tlaser.backend.export import export_model
from hf_tlaser.errors import UsageError
from hf_tlaser.hub import add_sentence_transformers_files
from hf_tlaser.hub.model_card import render_model_card
from hf_tlaser.models.ldt import LDTConfig
from hf_tlaser.models.tlaser import TLaserForTranslation
from hf_tlaser.training.cli import main
from hf_tlaser.training.joint import model_config
from hf_tlaser.training.presets import get_preset
from hf_tlaser.training.warm import backbone_overrides, check_backbone
from tests.fresh_process import fresh_vectors
from tests.test_warm_start import TEXTS, train_args
from tests.tiny_models import st_modules

SMALL = {"languages": ["en", "es"], "decoder_attention_heads": 2, "decoder_ffn_dim": 64, "dropout": 0.0}


@pytest.fixture(scope="module", params=["dense", "dense+normalize"])
def start_dir(request, tmp_path_factory, backbone_dir) -> Path:
    """The backbone as a sentence-transformers model with modules after pooling: CLS pooling, a Dense 32 -> 16 with
    random weights (tanh), and Normalize in the second case (LaBSE's layout)."""
    from sentence_transformers import SentenceTransformer

    modules = st_modules()
    torch.manual_seed(1)
    dense = modules.Dense(32, 16, activation_function=torch.nn.Tanh())
    torch.nn.init.normal_(dense.linear.weight, std=0.5)
    torch.nn.init.normal_(dense.linear.bias, std=0.5)
    layers = [modules.Transformer(str(backbone_dir)), modules.Pooling(32, pooling_mode="cls"), dense]
    if request.param == "dense+normalize":
        layers.append(modules.Normalize())
    folder = tmp_path_factory.mktemp(request.param.replace("+", "_"))
    SentenceTransformer(modules=layers).save(str(folder))
    return folder


def start_vectors(folder: Path) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder)).encode(TEXTS)


def warm_start(spec: Path, model: str = "ctlaser") -> TLaserForTranslation:
    """The member as ``hf-tlaser train --init-from spec`` builds it before its first update (the training run's
    functions: ``check_backbone``, ``backbone_overrides``, ``model_config``, ``load_into``)."""
    backbone = check_backbone(str(spec), model, None)
    preset = get_preset(model, "tiny")
    overrides = backbone_overrides(backbone, "backbone", dict(SMALL))
    config = model_config(preset, backbone.tokenizer, str(spec), overrides)
    torch.manual_seed(2)
    member = preset.model_class(config).eval()
    backbone.load_into(member.encoder)
    return member


@pytest.fixture(scope="module")
def warm_dir(start_dir, tmp_path_factory) -> Path:
    """The warm-started cT-LASER, saved with its tokenizer before any update."""
    folder = tmp_path_factory.mktemp("warm")
    warm_start(start_dir).save_pretrained(folder)
    check_backbone(str(start_dir), "ctlaser", None).tokenizer.save_pretrained(folder)
    return folder


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_the_modules_after_pooling_are_carried_into_the_config_and_the_decoder_reads_their_output(start_dir):
    member = warm_start(start_dir)
    modules = member.config.sentence_modules
    assert modules[0] == {
        "type": "Dense", "in_features": 32, "out_features": 16, "bias": True,
        "activation_function": "torch.nn.modules.activation.Tanh",
    }  # fmt: skip
    assert [m["type"] for m in modules] == ["Dense"] + (["Normalize"] if "normalize" in start_dir.name else [])
    # the decoder reads the final 16-dim vector (plus the language embedding in the one memory position)
    memory = member.decoder.layers[0].encoder_attn.k_proj.in_features
    assert memory == 16 + member.config.lang_embed_dim
    tokenizer = check_backbone(str(start_dir), "ctlaser", None).tokenizer
    batch = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    labels = tokenizer(TEXTS[1:3], padding=True, return_tensors="pt", add_special_tokens=False).input_ids
    out = member(**batch, labels=labels.masked_fill(labels.eq(tokenizer.pad_token_id), -100), tgt_lang="en")
    assert out.sentence_embedding.shape == (2, 16) and torch.isfinite(out.loss)
    generated = member.generate(vectors=out.sentence_embedding, tgt_lang="es", max_new_tokens=3)
    assert generated.shape[0] == 2


def test_before_training_the_warm_model_gives_the_starts_vectors_in_every_route(start_dir, warm_dir, tmp_path):
    expected = start_vectors(start_dir)
    assert expected.shape == (len(TEXTS), 16)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(warm_dir)
    model = AutoModel.from_pretrained(warm_dir, trust_remote_code=True)
    routes = {"hf_tlaser.encode": hf_tlaser.encode(model, tokenizer, TEXTS, precision="fp32")}
    # one fresh process without hf_tlaser for both routes that load the folder's own code
    routes["AutoModel"], routes["SentenceTransformer"] = fresh_vectors(
        f"""
        import json, torch
        from sentence_transformers import SentenceTransformer
        from transformers import AutoModel, AutoTokenizer
        model = AutoModel.from_pretrained({str(warm_dir)!r}, trust_remote_code=True).eval()
        tok = AutoTokenizer.from_pretrained({str(warm_dir)!r}, trust_remote_code=True)
        with torch.no_grad():
            auto = model(**tok({TEXTS!r}, padding=True, return_tensors="pt")).pooler_output
        st = SentenceTransformer({str(warm_dir)!r}, trust_remote_code=True).encode({TEXTS!r})
        print(json.dumps([auto.tolist(), st.tolist()]))
        """,
        tmp_path,
    )
    for route, vectors in routes.items():
        assert cosines(vectors, expected).min() >= 0.9999, route
        np.testing.assert_allclose(vectors, expected, atol=1e-5, err_msg=route)


def test_the_exported_encoder_applies_the_carried_modules(start_dir, warm_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    folder = Path(shutil.copytree(warm_dir, tmp_path / "model"))
    export_model(folder, "onnx")
    vectors = hf_tlaser.encode(folder, None, TEXTS, backend="onnx")
    np.testing.assert_allclose(vectors, start_vectors(start_dir), atol=1e-5)


def test_the_saved_layout_lists_the_carried_modules_once(start_dir, warm_dir):
    kinds = ["Transformer", "Pooling", "Dense"] + (["Normalize"] if "normalize" in start_dir.name else [])
    modules = json.loads((warm_dir / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == kinds
    assert (warm_dir / modules[2]["path"] / "model.safetensors").is_file()
    add_sentence_transformers_files(warm_dir, normalize=True)  # a user's Normalize: one at the end, never two
    again = [m["type"].rsplit(".", 1)[-1] for m in json.loads((warm_dir / "modules.json").read_text())]
    assert again == kinds[:3] + ["Normalize"]
    add_sentence_transformers_files(warm_dir, normalize=None)  # a re-save keeps the folder's choice
    assert [m["type"].rsplit(".", 1)[-1] for m in json.loads((warm_dir / "modules.json").read_text())] == again
    add_sentence_transformers_files(warm_dir, normalize=False)
    assert [m["type"].rsplit(".", 1)[-1] for m in json.loads((warm_dir / "modules.json").read_text())] == kinds
    card = render_model_card(warm_dir)
    assert "then the backbone's Dense 32->16 (Tanh)" in card


def test_ldt_carries_a_dense_of_its_width_and_refuses_another(start_dir, tmp_path):
    if "normalize" not in start_dir.name:
        pytest.skip("one layout is enough")
    from sentence_transformers import SentenceTransformer

    modules = st_modules()
    backbone = start_dir / json.loads((start_dir / "modules.json").read_text())[0]["path"]
    torch.manual_seed(3)
    layers = [modules.Transformer(str(backbone)), modules.Pooling(32, pooling_mode="mean"), modules.Dense(32, 32)]
    SentenceTransformer(modules=layers).save(str(tmp_path / "same"))
    ldt = warm_start(tmp_path / "same", "ldt")
    tokenizer = check_backbone(str(tmp_path / "same"), "ldt", None).tokenizer
    vectors = hf_tlaser.encode(ldt, tokenizer, TEXTS, precision="fp32")
    assert cosines(vectors, start_vectors(tmp_path / "same")).min() >= 0.9999
    with pytest.raises(ValueError, match="prediction head reads hidden_size=32"):
        LDTConfig(hidden_size=32, num_attention_heads=2, sentence_modules=[{"type": "Dense", "out_features": 16}])


def test_a_module_that_cannot_be_carried_is_refused_in_one_line(start_dir, tmp_path, capsys):
    if "normalize" not in start_dir.name:
        pytest.skip("one layout is enough")
    spec = tmp_path / "layernorm"
    shutil.copytree(start_dir, spec)
    modules = json.loads((spec / "modules.json").read_text())
    modules.append({"idx": 4, "name": "4", "path": "4_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (spec / "modules.json").write_text(json.dumps(modules))
    assert main(train_args(tmp_path / "out", spec)) == 2
    err = capsys.readouterr().err.strip()
    assert "its LayerNorm module (4_LayerNorm) after pooling cannot be carried" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
    residual = tmp_path / "residual"  # a Dense added to its input, not a plain Dense of the sentence vector
    shutil.copytree(start_dir, residual)
    dense_config = residual / modules[2]["path"] / "config.json"
    dense_config.write_text(json.dumps({**json.loads(dense_config.read_text()), "use_residual": True}))
    with pytest.raises(UsageError, match="is not a plain Dense of the sentence vector"):
        check_backbone(str(residual), "ctlaser", None)
    backbone = check_backbone(str(start_dir), "ctlaser", None)
    overrides = backbone_overrides(backbone, "backbone", {**SMALL, "teacher_dim": 8})
    with pytest.raises(ValueError, match="teacher_dim"):  # a head before pooling and a Dense after it
        model_config(get_preset("ctlaser", "tiny"), backbone.tokenizer, str(start_dir), overrides)
