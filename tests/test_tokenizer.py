"""Joint BPE: STR_TAG ... </s> wrapping, lowercasing, byte fallback for unseen scripts, AutoTokenizer round trip
(4.x-loadable config, no remote code)."""

from __future__ import annotations

import json
import subprocess
import sys

from transformers import AutoTokenizer

from hf_tlaser import save_tokenizer, train_tokenizer
from hf_tlaser.data import iter_lines
from hf_tlaser.tokenization import SPECIAL_TOKENS, main


def test_wraps_inputs_with_str_tag_and_eos(tokenizer):
    ids = tokenizer("Die Prager Börse")["input_ids"]
    assert ids[0] == tokenizer.cls_token_id == SPECIAL_TOKENS.index("STR_TAG")
    assert ids[-1] == tokenizer.eos_token_id and tokenizer.pad_token_id == 0
    assert tokenizer("")["input_ids"] == [tokenizer.cls_token_id, tokenizer.eos_token_id]
    assert tokenizer("x", add_special_tokens=False)["input_ids"][0] not in (
        tokenizer.cls_token_id,
        tokenizer.eos_token_id,
    )


def test_lowercase_switch(newstest_lines):
    texts = newstest_lines["en"][:200]
    lower = train_tokenizer(texts=texts, vocab_size=300, show_progress=False)
    cased = train_tokenizer(texts=texts, vocab_size=300, lowercase=False, show_progress=False)
    assert lower("Prague")["input_ids"] == lower("prague")["input_ids"]
    assert cased("Prague")["input_ids"] != cased("prague")["input_ids"]
    assert lower.decode(lower("the prague stock exchange")["input_ids"], skip_special_tokens=True) == (
        "the prague stock exchange"
    )


def test_save_load_with_auto_tokenizer(tmp_path, tokenizer):
    save_tokenizer(tokenizer, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"  # loads in transformers 4.x too
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "El Parlamento Europeo, ¿verdad?"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.cls_token == "STR_TAG" and loaded.pad_token == "<pad>"
    # no token_type_ids, under transformers 4.x (whose default adds them) as under 5.x: a Marian forward rejects them
    assert config["model_input_names"] == ["input_ids", "attention_mask"]
    assert set(loaded([text, "ok"], padding=True)) == {"input_ids", "attention_mask"}
    assert set(tokenizer(text)) == {"input_ids", "attention_mask"}


def first_lines(path, n: int) -> list[str]:
    return [line for line, _ in zip(iter_lines(path), range(n))]


def test_unseen_script_falls_back_to_bytes(tokenizer, data_dir):
    """The fixture BPE saw only de/en/es/fr/it: Chinese and Russian become byte tokens, not one <unk> each."""
    zh = first_lines(data_dir / "wmt-newstest-more" / "newstest2018.zh-en.zh", 50)
    ru = first_lines(data_dir / "wmt-newstest-more" / "newstest2014.ru-en.ru", 50)
    assert tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS + ["<0x00>", "<0xFF>"]) == [0, 1, 2, 3, 4, 259]
    for texts in (zh, ru):
        ids = tokenizer(texts)["input_ids"]
        assert not any(tokenizer.unk_token_id in row for row in ids)
        assert len({tuple(row) for row in ids}) == len(set(texts))  # different sentences, different ids
        normalise = tokenizer.backend_tokenizer.normalizer.normalize_str
        assert tokenizer.decode(ids[0], skip_special_tokens=True) == normalise(texts[0])


def test_saved_tokenizer_loads_without_remote_code(tmp_path, tokenizer):
    save_tokenizer(tokenizer, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert "auto_map" not in config
    code = "import sys; from transformers import AutoTokenizer, PreTrainedTokenizerFast as Fast; "
    code += "t = AutoTokenizer.from_pretrained(sys.argv[1]); print(isinstance(t, Fast), len(t), t('日本')['input_ids'])"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[:2] == ["True", str(len(tokenizer))]


def test_train_tokenizer_cli_on_a_blank_file(tmp_path, capsys):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    assert main(["--files", str(blank), "--output-dir", str(tmp_path / "tok"), "--vocab-size", "100"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        f"hf-tlaser train-tokenizer: error: no text to train the tokenizer on: only empty or blank lines in {blank}"
    )
    assert "Traceback" not in err and not (tmp_path / "tok").exists()
    assert main(["--corpora", "nope", "--output-dir", str(tmp_path / "tok")]) == 2
    assert "unknown corpus 'nope'; known corpora:" in capsys.readouterr().err
