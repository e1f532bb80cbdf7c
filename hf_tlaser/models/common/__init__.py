"""Model code shared by every family (T-LASER / cT-LASER, LASER, Yu 2018, LDT, cNV): ``sentence_embedding``."""
