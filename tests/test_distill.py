"""``hf-tlaser train --teacher``: the distillation term against a hand computation, the collator's pivot texts,
short runs of several families with a tiny sentence-transformers teacher (loss parts logged, the run saves), and the
exit-2 usage errors."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from ddp_launch import launch_ddp
from fresh_process import auto_model_vectors

import hf_tlaser
from hf_tlaser.models.common.losses import distill_loss
from hf_tlaser.teachers.cli import main as teachers_main
from hf_tlaser.training.cli import main
from hf_tlaser.training.distill import DistillCollator, pivot_of_group, pivot_of_pair
from hf_tlaser.training.trainer import DISTILL_INPUTS, LaserTrainer
from tests.tiny_models import make_st_model

TINY = {
    "tlaser": ["hidden_size=32", "num_hidden_layers=2", "num_attention_heads=4", "intermediate_size=64",
               "decoder_attention_heads=4", "decoder_ffn_dim=64"],
    "laser1": ["embed_dim=32", "lstm_hidden_size=16", "decoder_hidden_size=64"],
    "ldt": ["hidden_size=32", "num_attention_heads=4", "intermediate_size=64"],
    "yu2018": ["embed_dim=32", "encoder_hidden_size=16", "hidden_size=32", "decoder_hidden_size=64"],
}  # fmt: skip
TINY["ctlaser"] = TINY["tlaser"]


@pytest.fixture(scope="module")
def teacher32(tmp_path_factory, tokenizer) -> Path:
    return make_st_model(tmp_path_factory.mktemp("st32"), tokenizer, hidden_size=32)


def distill_args(out: Path, tokenizer_dir: Path, model: str, *extra: str) -> list[str]:
    args = [
        "--model", model, "--preset", "tiny", "--corpora", "wmt-newstest-multiway", "--max-lines", "200",
        "--tokenizer", str(tokenizer_dir), "--output-dir", str(out), "--max-tokens", "600",
        "--update-tokens", "600", "--warmup-updates", "2", "--learning-rate", "3e-3", "--logging-steps", "1",
        "--precision", "fp32", "--seed", "3", "--max-steps", "3", "--pairs", "de-en,fr-en",
    ]  # fmt: skip
    return args + [f"--set={item}" for item in TINY.get(model, [])] + list(extra)


def test_distill_loss_matches_a_hand_computation():
    student = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    teacher = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    mse, cosine = distill_loss(student, teacher)
    assert float(mse) == pytest.approx((1 + 1 + 0 + 1) / 4)
    assert float(cosine) == pytest.approx((0.0 + 1.0) / 2)


def test_distill_term_is_scaled_as_the_token_normalised_loss():
    """weight x MSE x (this micro-batch's target tokens / the update's), times the processes when the Trainer
    averages tokens across them: the alignment loss's scaling."""

    class Encoder(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return SimpleNamespace(pooler_output=input_ids.float())

    model = SimpleNamespace(encoder=Encoder())
    trainer = SimpleNamespace(
        distill_weight=0.5,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m, num_processes=2),
        args=SimpleNamespace(average_tokens_across_devices=True),
    )
    student, teacher = torch.tensor([[1, 0], [0, 2]]), torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    term, parts = LaserTrainer.distill_term(trainer, model, student, None, teacher, torch.tensor(30), torch.tensor(120))
    assert float(parts["loss_distill"]) == pytest.approx(0.75)
    assert float(term) == pytest.approx(0.5 * 0.75 * 30 / 120 * 2)
    term, _ = LaserTrainer.distill_term(trainer, model, student, None, teacher, torch.tensor(30), None)
    assert float(term) == pytest.approx(0.5 * 0.75)


def test_distillation_term_alone_trains_the_student_toward_the_teacher(
    tmp_path, tokenizer, tiny_tlaser_kwargs, newstest_lines
):
    """The real trainer's ``compute_loss`` with the teacher inputs, minus without them, gives the encoder exactly the
    gradient of ``distill_term``, and it is not zero; a few AdamW steps on that term alone bring the student's
    vectors (``encode``'s) towards the teacher's. A student vector detached (distillation doing nothing) fails."""
    from transformers import TrainingArguments

    from hf_tlaser import TLaserConfig, TLaserForTranslation
    from hf_tlaser.training.joint import collator_for

    torch.manual_seed(0)
    model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs)).train()
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    trainer = LaserTrainer(model=model, args=args, batch_sampler=None, distill_weight=1.0)
    de, en = newstest_lines["de"][:4], newstest_lines["en"][:4]
    teacher = torch.randn(4, 32, generator=torch.Generator().manual_seed(1)).numpy()
    collator = DistillCollator(
        collator_for(model, tokenizer, [("de", "en")]), tokenizer, teacher, {t: i for i, t in enumerate(en)},
        [("de", "en")], ["en"],
    )  # fmt: skip
    examples = [{"src_lang": "de", "tgt_lang": "en", "src": a, "tgt": b} for a, b in zip(de, en)]
    batch = collator(examples)
    ids, mask, targets = (batch[key] for key in DISTILL_INPUTS)

    def encoder_gradient(loss: torch.Tensor) -> torch.Tensor:
        model.zero_grad()
        loss.backward()
        return torch.cat([
            (p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.encoder.parameters()
        ])  # fmt: skip

    with_teacher = encoder_gradient(trainer.compute_loss(model, dict(batch)))
    plain = {key: value for key, value in batch.items() if key not in DISTILL_INPUTS}
    without = encoder_gradient(trainer.compute_loss(model, plain))
    term, _ = trainer.distill_term(model, ids, mask, targets, torch.tensor(1), None)
    own = encoder_gradient(term)
    assert float(own.norm()) > 1e-3
    assert float((with_teacher - without - own).norm()) < 1e-3 * float(own.norm())  # fp32 rounding apart

    texts, pivots = collator.sentences(examples)
    wanted = teacher[[en.index(text) for text in pivots]]

    def distance() -> float:
        model.eval()
        vectors = model.encoder.encode(texts, tokenizer)
        model.train()
        return float(np.mean((vectors - wanted) ** 2))

    before = distance()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(10):
        optimizer.zero_grad()
        trainer.distill_term(model, ids, mask, targets, torch.tensor(1), None)[0].backward()
        optimizer.step()
    after = distance()
    assert after < 0.8 * before, (before, after)  # measured: 1.81 -> 1.06


def test_teacher_distils_with_the_evaluation_prompt(teacher32):
    """``--teacher`` encodes the pivot texts with the prompt that evaluation's reference rows use (e5: ``query: ``)."""
    from hf_tlaser.training.distill import check_teacher
    from hf_tlaser.training.spec import RunSpec

    teacher = check_teacher(RunSpec(output_dir="x", model="ctlaser", teacher=str(teacher32)))
    assert (teacher.prompt_name, teacher.prompt) == ("query", "query: ")


def test_pivot_sides():
    assert pivot_of_pair("de", "en", ["en"]) == "en"
    assert pivot_of_pair("en", "de", ["en"]) == "en"
    assert pivot_of_pair("de", "fr", ["en"]) == "fr"  # no pivot: the target side
    assert pivot_of_pair("en", "es", ["en", "es"]) == "es"  # both pivots: the target side
    assert pivot_of_group({"de": "x", "en": "y", "fr": None}, [("de", "en")], ["en"]) == "en"
    assert pivot_of_group({"de": "x", "fr": "z", "en": None}, [("de", "fr")], ["en"]) == "fr"
    assert pivot_of_group({"de": "x", "fr": "z", "es": "w"}, [("de", "fr")], ["es"]) == "fr"  # es: no pair


def test_collator_gathers_the_pivot_vector_for_both_sides(tokenizer):
    class Inner:
        def __call__(self, examples):
            return {"labels": torch.zeros(len(examples), 1, dtype=torch.long)}

    matrix = np.arange(6, dtype=np.float32).reshape(3, 2)
    row_of = {"a": 0, "b": 1, "c": 2}
    collator = DistillCollator(Inner(), tokenizer, matrix, row_of, [("de", "en"), ("fr", "en")], ["en"])
    pair = [{"src_lang": "de", "tgt_lang": "en", "src": "Hallo", "tgt": "b"}]
    batch = collator(pair)
    ids, mask, targets = (batch[key] for key in DISTILL_INPUTS)
    assert ids.shape[0] == mask.shape[0] == 2
    assert torch.equal(targets, torch.tensor([[2.0, 3.0], [2.0, 3.0]]))
    group = [{"de": "Hallo", "en": "c", "fr": "Salut"}]
    targets = collator(group)[DISTILL_INPUTS[2]]
    assert torch.equal(targets, torch.tensor([[4.0, 5.0]] * 3))


def test_collator_computes_a_pivot_text_outside_the_plan_once(tokenizer, caplog):
    class Teacher:
        spec = "toy"

        def __init__(self):
            self.asked: list[list[str]] = []

        def encode(self, texts):
            self.asked.append(list(texts))
            return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    teacher = Teacher()
    inner = lambda examples: {}  # noqa: E731
    collator = DistillCollator(inner, tokenizer, np.ones((1, 2)), {"a": 0}, [("de", "en")], ["en"], teacher)
    pair = dict(src_lang="de", tgt_lang="en")
    pairs = [dict(src="x", tgt="a", **pair), dict(src="y", tgt="bcd", **pair)]
    targets = collator(pairs)[DISTILL_INPUTS[2]]
    assert targets.tolist() == [[1.0, 1.0]] * 2 + [[3.0, 1.0]] * 2
    collator(pairs)
    assert teacher.asked == [["bcd"]] and collator.late == 1  # computed once, then read
    assert sum("outside the planned micro-batches" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(KeyError, match="'bcd'"):
        DistillCollator(inner, tokenizer, np.ones((1, 2)), {"a": 0}, [("de", "en")], ["en"])(pairs)


def error_lines(stderr: str) -> list[str]:
    """The error lines of stderr (loading a teacher may draw progress bars there)."""
    return [line for line in stderr.splitlines() if "error" in line.lower()]


def logged(out: Path) -> list[dict]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [entry for entry in history if "loss" in entry]


@pytest.mark.parametrize("model", ["tlaser", "ctlaser", "laser1", "ldt", "yu2018"])
def test_short_run_with_a_teacher_logs_the_parts_and_saves(model, tmp_path, tokenizer_dir, teacher32, caplog):
    caplog.set_level(logging.INFO, logger="hf_tlaser.train")
    out = tmp_path / "run"
    args = distill_args(out, tokenizer_dir, model, "--teacher", str(teacher32), "--teacher-cache", str(tmp_path / "c"))
    assert main(args) == 0
    history = logged(out)
    assert len(history) == 3
    for entry in history:
        assert entry["loss_distill"] > 0 and math.isfinite(entry["loss_distill"]), entry
        assert -1.0 <= entry["distill_cosine"] <= 1.0, entry
    assert (out / "model.safetensors").is_file()
    warnings = [r.getMessage() for r in caplog.records if "does not list the training languages" in r.getMessage()]
    assert len(warnings) == 1 and "['fr']" in warnings[0], warnings  # the tiny teacher's card: de, en
    messages = [r.getMessage() for r in caplog.records]
    planned = [m for m in messages if "micro-batches read" in m]
    assert len(planned) == 1 and "the run's 4 micro-batches read" in planned[0], planned  # 3 updates + 1 ahead
    assert not [m for m in messages if "outside the planned micro-batches" in m]  # the plan held every pivot text
    record = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else None
    if record is not None:
        assert record["args"]["teacher"] == str(teacher32)


def test_multiway_batches_with_a_teacher(tmp_path, tokenizer_dir, teacher32):
    out = tmp_path / "run"
    extra = ["--teacher", str(teacher32), "--teacher-cache", "none", "--batching", "multiway"]
    assert main(distill_args(out, tokenizer_dir, "ctlaser", *extra)) == 0
    assert all(entry["loss_distill"] > 0 for entry in logged(out))


def test_without_a_teacher_nothing_is_logged(tmp_path, tokenizer_dir):
    out = tmp_path / "run"
    assert main(distill_args(out, tokenizer_dir, "tlaser", "--max-steps", "1")) == 0
    assert all("loss_distill" not in entry for entry in logged(out))


@pytest.mark.parametrize(
    ("model", "extra", "expected"),
    [
        ("tlaser", ["--teacher", "/no/such/teacher"], "--teacher"),
        ("tlaser", ["--teacher", "TEACHER", "--set=hidden_size=64"], "--set teacher_dim=32"),
        ("tlaser", ["--teacher", "TEACHER", "--set=teacher_dim=16"], "the student's 16"),
        ("laser1", ["--teacher", "TEACHER", "--set=lstm_hidden_size=32"], "no projection head"),
        ("tlaser", ["--teacher", "TEACHER", "--distill-weight", "0"], "--distill-weight"),
    ],
)
def test_bad_teacher_inputs_exit_2_with_one_line(model, extra, expected, tmp_path, tokenizer_dir, teacher32, capsys):
    out = tmp_path / "run"
    extra = [str(teacher32) if item == "TEACHER" else item for item in extra]
    assert main(distill_args(out, tokenizer_dir, model, *extra)) == 2
    err = error_lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("hf-tlaser train: error:") and expected in err[0], err
    assert not out.exists() or not any(out.iterdir())


def test_cnv_refuses_a_teacher(tmp_path, teacher32, capsys):
    args = ["--model", "cnv", "--pairs", "de-en", "--output-dir", str(tmp_path / "run"), "--teacher", str(teacher32)]
    assert main(args) == 2
    err = error_lines(capsys.readouterr().err)
    families = "tlaser, ctlaser, laser1, laser6, claser6, yu2018, ldt"
    assert err == [f"hf-tlaser train: error: --teacher is an option of --model {families}, not of --model cnv"], err


@pytest.mark.parametrize("family", ["tlaser", "ldt"])
def test_projection_head_survives_save_and_load(family, tmp_path, tokenizer, tiny_tlaser_kwargs):
    """A ``teacher_dim`` head: encode, AutoModel, sentence-transformers, pipeline and a fresh process without
    hf_tlaser give the same 24-dim vectors; the decoder reads the unprojected ones."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, pipeline

    from hf_tlaser import LDTConfig, LDTForAlignment, TLaserConfig, TLaserForTranslation, save_tokenizer

    torch.manual_seed(0)
    if family == "tlaser":
        model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs, teacher_dim=24)).eval()
    else:
        config = LDTConfig(vocab_size=len(tokenizer), hidden_size=32, num_attention_heads=4, intermediate_size=64)
        config.teacher_dim = 24
        model = LDTForAlignment(config).eval()
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    texts = ["Die Prager Börse stürzt.", "El parlamento europeo aprobó la ley."]
    expected = model.encoder.encode(texts, tokenizer)
    assert expected.shape == (2, 24)
    np.testing.assert_allclose(hf_tlaser.encode(model, tokenizer, texts, precision="fp32"), expected, atol=1e-5)
    if family == "tlaser":
        ids = tokenizer(texts, padding=True, return_tensors="pt")
        assert model.encode_sentences(ids["input_ids"], ids["attention_mask"]).shape[-1] == 32
    loaded = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    np.testing.assert_allclose(loaded.encode(texts, tokenizer), expected, atol=1e-5)
    st = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(st.encode(texts), expected, atol=1e-5)
    extractor = pipeline("feature-extraction", model=str(folder), trust_remote_code=True, device="cpu")
    tokens = np.asarray(extractor(texts[0])[0], dtype=np.float32)
    pooled = tokens[0] if family == "tlaser" else tokens.mean(0)
    np.testing.assert_allclose(pooled, expected[0], atol=1e-5)
    check = 'assert "hf_tlaser" not in type(model).__module__'
    got = auto_model_vectors(folder, texts, tmp_path, route="encode", check=check)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_short_run_with_a_projection_head(tmp_path, tokenizer_dir, teacher32):
    out = tmp_path / "run"
    extra = ["--teacher", str(teacher32), "--teacher-cache", "none", "--set=hidden_size=64", "--set=teacher_dim=32"]
    extra += ["--set=intermediate_size=128"]
    assert main(distill_args(out, tokenizer_dir, "ctlaser", *extra)) == 0
    assert all("loss_distill" in entry for entry in logged(out))
    assert json.loads((out / "config.json").read_text())["teacher_dim"] == 32
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["word_embedding_dimension"] == 32


@pytest.mark.parametrize(("limit", "rc"), [("100000", 0), ("20", 2)])
def test_vectors_teacher(limit, rc, tmp_path, tokenizer_dir, teacher32, data_dir, capsys):
    """A ``vectors:`` file of the corpus's English texts trains; one that lacks some of them exits 2 in one line."""
    vectors = tmp_path / "en.npy"
    args = ["--teacher", str(teacher32), "--corpora", "wmt-newstest-multiway", "--data-dir", str(data_dir)]
    assert teachers_main([*args, "--limit", limit, "--cache-dir", "none", "--output", str(vectors)]) == 0
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(distill_args(out, tokenizer_dir, "ctlaser", "--teacher", f"vectors:{vectors}")) == rc
    if rc:
        err = error_lines(capsys.readouterr().err)
        assert len(err) == 1 and "texts are not in it" in err[0], err
    else:
        assert all("loss_distill" in entry for entry in logged(out))


def test_trains_under_two_process_ddp(tmp_path, tokenizer_dir, teacher32):
    """``accelerate launch`` with 2 CPU processes: the teacher term (an encoder call beside the DDP-wrapped forward)
    keeps the weights identical across ranks."""
    out = tmp_path / "ddp"
    extra = ["--teacher", str(teacher32), "--teacher-cache", "none", "--max-steps", "2", "--update-tokens", "1200"]
    ranks = launch_ddp(out, distill_args(out, tokenizer_dir, "ctlaser", *extra))
    assert ranks[0]["world_size"] == 2 and ranks[0]["checksum"] == ranks[1]["checksum"]
    assert all("loss_distill" in entry for entry in logged(out))
