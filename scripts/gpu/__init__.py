"""The GPU session's parts; ``scripts/gpu_session.py`` is their command line (``gpu.cli``).

Here, before the lease: ``carry`` (what travels vs the limit, an archive in parts), ``wheels`` (the pinned stack's
wheels for the GPU machine) and ``data`` (the corpora as one archive). On the GPU machine, with the standard library
only: ``session`` (``Session``: ``call``'s time, commands and publishing, ``stages``' setup, bench, dist, train and
finish, ``levers``' release, levers and negatives), ``profiles`` (what ``--size`` sets, the runs' command lines),
``processes`` (time limits, detached runs) and ``records`` (the stages' JSON records and SUMMARY.md).
"""
