"""The bitext layer: what evaluation (xsim, BUCC F1) and mining (``hf-tlaser mine``, ``mine-pipeline``) share, below
both.

- :mod:`~hf_tlaser.bitext.knn`: exact kNN of matrices in memory (faiss, torch, sparse) and the faiss loader;
- :mod:`~hf_tlaser.bitext.index`: kNN of memory-mapped vectors at any size (exact or compressed faiss indexes,
  sharded to a memory budget, on GPU when faiss sees one);
- :mod:`~hf_tlaser.bitext.margin`: LASER's margin scores of kNN lists;
- :mod:`~hf_tlaser.bitext.select`: the retrieval modes, each sentence used once, the threshold, a file's unique lines
  (from its texts, or from their keys in bounded memory);
- :mod:`~hf_tlaser.bitext.mining`: the two put together (:func:`mine` in memory, :func:`mine_vectors` on disk,
  :func:`select_mined` from kNN lists);
- :mod:`~hf_tlaser.bitext.filters`: the filters of mined pairs (language identification, lengths, score cap,
  near-duplicates, thresholds by language pair), pure masks;
- :mod:`~hf_tlaser.bitext.texts`: a text file read and checked once (lines and SHA-256), or, too large to hold, its
  digest read in chunks, its lines as keys and the lines of given numbers; the one TSV writer.
"""

from .knn import knn
from .margin import MARGINS, margin_scores
from .mining import Mined, mine, mine_vectors, write_bitexts
from .select import RETRIEVALS, select_pairs
from .texts import Texts, read_texts, write_tsv

__all__ = [
    "MARGINS",
    "RETRIEVALS",
    "Mined",
    "Texts",
    "knn",
    "margin_scores",
    "mine",
    "mine_vectors",
    "read_texts",
    "select_pairs",
    "write_bitexts",
    "write_tsv",
]
