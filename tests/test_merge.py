"""``hf-tlaser merge`` (WiSE-FT, issue 53): alpha = 0 gives the start's vectors and alpha = 1 the tuned model's,
exactly; in between, the encoder weights are the interpolation and the decoder stays tuned; bad input is one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from transformers import AutoTokenizer, XLMRobertaModel

from hf_tlaser import TLaserForTranslation
from hf_tlaser.encoding import encode, load_model
from hf_tlaser.training.merge import RECORD
from hf_tlaser.training.merge import main as merge_main
from tests.tiny_models import save_warm_ctlaser

TEXTS = ["Guten Morgen.", "Das Haus ist rot.", "The house is red.", "El perro duerme."]


@pytest.fixture(scope="module")
def tuned(warm_dir, tmp_path_factory):
    """``warm_dir`` after a pretend fine-tuning: every weight moved by noise, saved as its own folder."""
    folder = tmp_path_factory.mktemp("tuned") / "tuned"
    shutil.copytree(warm_dir, folder)
    generator = torch.Generator().manual_seed(0)
    for path in folder.glob("*.safetensors"):
        state = load_file(path)
        moved = {
            k: v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v
            for k, v in state.items()
        }
        save_file(moved, path, metadata={"format": "pt"})
    return folder


def vectors(folder) -> np.ndarray:
    model, tokenizer = load_model(folder, backend="torch")
    return encode(model, tokenizer, TEXTS, precision="fp32")


def merged(tuned, warm_dir, tmp_path, alpha: float):
    out = tmp_path / f"merged-{alpha}"
    code = merge_main([str(tuned), "--start", str(warm_dir.parent / "st"), "--alpha", str(alpha), "--output", str(out)])
    assert code == 0
    return out


def test_alpha_ends_give_the_two_folders_vectors_exactly(tuned, warm_dir, tmp_path):
    start, end = vectors(warm_dir), vectors(tuned)
    assert not np.allclose(start, end, atol=1e-3)
    np.testing.assert_array_equal(vectors(merged(tuned, warm_dir, tmp_path, 0.0)), start)
    np.testing.assert_array_equal(vectors(merged(tuned, warm_dir, tmp_path, 1.0)), end)


def test_halfway_interpolates_the_encoder_and_keeps_the_decoder(tuned, warm_dir, tmp_path):
    out = merged(tuned, warm_dir, tmp_path, 0.25)
    state, before, after = (load_file(folder / "model.safetensors") for folder in (out, warm_dir, tuned))
    encoder = [name for name in state if name.startswith("encoder.backbone.") and state[name].is_floating_point()]
    assert encoder and len(encoder) == json.loads((out / RECORD).read_text())["interpolated_weights"]
    for name in encoder:
        torch.testing.assert_close(state[name], 0.75 * before[name] + 0.25 * after[name])
    for name in (n for n in state if n.startswith("decoder.")):
        torch.testing.assert_close(state[name], after[name], rtol=0, atol=0)
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    middle = vectors(out)
    assert not np.allclose(middle, vectors(warm_dir), atol=1e-4) and not np.allclose(middle, vectors(tuned), atol=1e-4)


def test_bad_input_is_one_line(tuned, warm_dir, st_folder, tmp_path, capsys):
    start = str(warm_dir.parent / "st")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("a user's file")
    cases = [
        ([str(tuned), "--start", start, "--alpha", "1.5", "--output", str(tmp_path / "a")], "--alpha 1.5"),
        ([str(tuned), "--start", start, "--alpha", "nan", "--output", str(tmp_path / "a")], "--alpha nan"),
        ([str(tuned), "--start", start, "--alpha", "0.5", "--output", str(taken)], "not empty"),
        ([str(tuned), "--start", str(st_folder), "--alpha", "0.5", "--output", str(tmp_path / "b")], "--start"),
        ([str(st_folder), "--alpha", "0.5", "--output", str(tmp_path / "c")], "not an hf_tlaser model"),
    ]
    for argv, message in cases:
        assert merge_main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert (taken / "mine.txt").read_text() == "a user's file" and not (tmp_path / "b").exists()


NEW_PIECES = {"Ω": 7, "Ψ": 150}
"""Pieces the wider start adds, at the ids they take (the tuned model's later pieces move up)."""


@pytest.fixture(scope="module")
def wider(backbone_dir, tmp_path_factory):
    """``backbone_dir`` with two more pieces inside its vocabulary (as the full multilingual-e5-small is to the copy
    trimmed to the corpora's pieces): the same weights, the old rows under their new ids, random rows for the new
    pieces; warm-started as ``warm_dir`` is. Returns the root holding ``st`` (the start) and ``warm`` (its member)."""
    root = tmp_path_factory.mktemp("wider")
    source = json.loads((backbone_dir / "tokenizer.json").read_text())
    old = source["model"]["vocab"]
    order = sorted(old, key=old.get)
    for piece, at in sorted(NEW_PIECES.items(), key=lambda item: item[1]):
        order.insert(at, piece)
    source["model"]["vocab"] = {piece: i for i, piece in enumerate(order)}
    model = XLMRobertaModel.from_pretrained(backbone_dir, add_pooling_layer=False)
    table = model.embeddings.word_embeddings.weight.detach()
    rows = torch.randn(len(order), table.shape[1], generator=torch.Generator().manual_seed(1))
    rows[[order.index(piece) for piece in old]] = table[[old[piece] for piece in old]]
    model.resize_token_embeddings(len(order))
    model.embeddings.word_embeddings.weight.data.copy_(rows)
    model.save_pretrained(root / "xlmr")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (backbone_dir / name).is_file():
            shutil.copy2(backbone_dir / name, root / "xlmr" / name)
    (root / "xlmr" / "tokenizer.json").write_text(json.dumps(source))
    save_warm_ctlaser(root, root / "xlmr")
    return root


def translation_loss(folder, texts: list[str]) -> float:
    """The member's training loss (translation, alignment, distance) on a toy batch of ``texts``, translated to the
    next text toward English, tokenized by the folder's own tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = TLaserForTranslation.from_pretrained(folder).eval()
    src = tokenizer(texts[:-1], padding=True, return_tensors="pt")
    targets = tokenizer(texts[1:], add_special_tokens=False)["input_ids"]
    labels = torch.full((len(targets), max(map(len, targets)) + 1), -100)
    for i, ids in enumerate(targets):
        labels[i, : len(ids) + 1] = torch.tensor(ids + [tokenizer.eos_token_id])
    with torch.no_grad():
        output = model(src.input_ids, src.attention_mask, labels=labels, tgt_lang=torch.zeros(len(targets)).long())
    return float(output.loss)


@pytest.mark.parametrize("restricted", [False, True])
def test_a_larger_vocabulary_extends_the_tuned_model(tuned, wider, tmp_path, restricted):
    source = tuned
    if restricted:  # the decoder restricted to some pieces, as --decoder-vocab targets trains it
        source = tmp_path / "restricted"
        shutil.copytree(tuned, source)
        keep = torch.tensor(sorted({*range(5), *range(20, 200, 3)}))
        state = load_file(source / "model.safetensors")
        for name in ("decoder.embed_tokens.weight", "lm_head.weight"):
            state[name] = state[name][keep].contiguous()
        state["decoder_vocab_ids"] = keep
        save_file(state, source / "model.safetensors", metadata={"format": "pt"})
        config = json.loads((source / "config.json").read_text())
        (source / "config.json").write_text(json.dumps({**config, "decoder_vocab_size": len(keep)}))
    start = wider / "st"
    outputs = {}
    for alpha in (0.0, 1.0):
        outputs[alpha] = tmp_path / f"merged-{alpha}"
        argv = [str(source), "--start", str(start), "--alpha", str(alpha), "--output", str(outputs[alpha])]
        assert merge_main(argv) == 0
    texts = [*TEXTS, "Ω Ψ"]
    np.testing.assert_array_equal(vectors(outputs[0.0]), vectors(wider / "warm"))
    np.testing.assert_array_equal(vectors(outputs[1.0]), vectors(source))  # TEXTS have no new piece
    model, tokenizer = load_model(outputs[1.0], backend="torch")
    new = encode(model, tokenizer, texts[-1:], precision="fp32")
    old = encode(*load_model(source, backend="torch"), texts[-1:], precision="fp32")
    assert not np.allclose(new, old, atol=1e-3)  # whole pieces instead of <unk>
    assert tokenizer.convert_tokens_to_ids(list(NEW_PIECES)) == list(NEW_PIECES.values())
    state, tuned_state = load_file(outputs[1.0] / "model.safetensors"), load_file(source / "model.safetensors")
    table = state["encoder.backbone.embeddings.word_embeddings.weight"]
    start_table = load_file(wider / "warm" / "model.safetensors")["encoder.backbone.embeddings.word_embeddings.weight"]
    torch.testing.assert_close(table[list(NEW_PIECES.values())], start_table[list(NEW_PIECES.values())])
    config = json.loads((outputs[1.0] / "config.json").read_text())
    assert config["vocab_size"] == config["backbone"]["vocab_size"] == len(table) == len(tokenizer)
    assert config["prompt_ids"] == tokenizer("query:", add_special_tokens=False)["input_ids"]
    decoder_ids = state["decoder_vocab_ids"]
    pieces = tokenizer.convert_ids_to_tokens(decoder_ids.tolist())
    old_tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    expected = tuned_state.get("decoder_vocab_ids", torch.arange(old_tokenizer.get_vocab_size()))
    assert pieces == [old_tokenizer.id_to_token(i) for i in expected.tolist()]
    assert json.loads((outputs[1.0] / RECORD).read_text())["vocabulary"]["added"] == len(NEW_PIECES)
    assert translation_loss(outputs[1.0], TEXTS) == pytest.approx(translation_loss(source, TEXTS), abs=1e-6)


def test_a_start_without_the_tuned_pieces_is_refused(wider, warm_dir, tmp_path, capsys):
    argv = [str(wider / "warm"), "--start", str(warm_dir.parent / "st"), "--alpha", "0.5", "--output", str(tmp_path)]
    assert merge_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lacks 2 of the tuned model's" in err, err
