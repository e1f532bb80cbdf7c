"""Teachers for LASER3-style distillation and reference rows: load a teacher SPEC (:func:`load_teacher`, an
:class:`~hf_tlaser.encoders.Encoder` as :func:`hf_tlaser.encoders.load` gives it), cache its vectors once per
(teacher fingerprint, prompt, text) (:class:`TeacherCache`) and precompute them for a corpus (``hf-tlaser
teacher-vectors``, :func:`teacher_texts`, written as a ``vectors:`` file by :func:`write_vectors`).

Typical use by a trainer::

    teacher = load_teacher(args.teacher, prompt_name=args.teacher_prompt)  # UsageError before data is read
    cache = TeacherCache(args.teacher_cache, teacher)  # None: $HF_TLASER_TEACHER_CACHE, else ~/.cache/...
    targets = cache.get(english_texts)  # float32 [N, teacher.dim], in input order

The loading, the fingerprint and the ``vectors:`` format live in :mod:`hf_tlaser.encoders` (a loaded teacher is an
:class:`~hf_tlaser.encoders.Encoder`: ``HfTlaserEncoder``, ``SentenceTransformerEncoder``, ``VectorsEncoder``).
"""
