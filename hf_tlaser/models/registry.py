"""Every model family, one entry each: the ``FAMILY`` of its folder (``hf_tlaser/models/<folder>/family.py``).
Adding a family is a folder with its ``family.py`` (its classes and capabilities, its presets and its model card's
section) and its entry here."""

from __future__ import annotations

from hf_tlaser.models.cnv.family import FAMILY as CNV
from hf_tlaser.models.family import Family
from hf_tlaser.models.laser.family import FAMILY as LASER
from hf_tlaser.models.ldt.family import FAMILY as LDT
from hf_tlaser.models.tlaser.family import FAMILY as TLASER
from hf_tlaser.models.yu2018.family import FAMILY as YU2018

FAMILIES: dict[str, Family] = {family.model_type: family for family in (TLASER, LASER, CNV, YU2018, LDT)}
"""``model_type`` -> its family, in the order of their members in ``--model``."""
