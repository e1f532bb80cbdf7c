"""Model code shared by every family (T-LASER / cT-LASER, LASER, Yu 2018, LDT, cNV), one module per concern:
``losses``, ``pooling``, ``st_folder`` (the sentence-transformers folder format), ``backbone``, ``positions``,
``rnn``, ``encode``, ``translation`` and ``remote_code`` (the ``save_pretrained`` that writes them next to a family's
model file)."""
