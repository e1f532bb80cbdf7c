"""Evaluation: xsim / P@1 retrieval, margin-based bitext mining, zero-shot classification, readers, plots, and the
reference rows (random init, ``tfidf-char`` lexical baseline, majority class, other models given with
``--reference`` and their cross-model rows) reported next to every model.

Everything works on embeddings (numpy or torch) or on an ``embed(texts) -> np.ndarray`` callable, so it is
independent of the model. kNN uses faiss when importable, else torch (``backend=`` to force one).
"""
