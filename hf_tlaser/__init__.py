"""hf_tlaser: T-LASER / cT-LASER multilingual sentence and document embeddings for Hugging Face Transformers."""

from transformers import AutoConfig, AutoModel

from hf_tlaser.encoding import encode, load_model
from hf_tlaser.models.cnv import CNVConfig, CNVModel
from hf_tlaser.models.common.losses import distance_constraint_loss
from hf_tlaser.models.laser import LaserConfig, LaserForTranslation, LaserModel
from hf_tlaser.models.ldt import LDTConfig, LDTForAlignment, LDTModel
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.models.tlaser import TLaserConfig, TLaserForTranslation, TLaserModel
from hf_tlaser.models.yu2018 import Yu2018Config, Yu2018ForTranslation, Yu2018Model
from hf_tlaser.tokenization import save_tokenizer, train_tokenizer
from hf_tlaser.version import __version__ as __version__

for _family in FAMILIES.values():
    AutoConfig.register(_family.model_type, _family.config_class, exist_ok=True)
    AutoModel.register(_family.config_class, _family.model_class, exist_ok=True)
    if _family.head_auto is not None:
        _family.head_auto.register(_family.config_class, _family.head_class, exist_ok=True)

__all__ = [
    "TLaserConfig",
    "TLaserModel",
    "TLaserForTranslation",
    "LaserConfig",
    "LaserModel",
    "LaserForTranslation",
    "CNVConfig",
    "CNVModel",
    "LDTConfig",
    "LDTModel",
    "LDTForAlignment",
    "Yu2018Config",
    "Yu2018Model",
    "Yu2018ForTranslation",
    "distance_constraint_loss",
    "encode",
    "load_model",
    "train_tokenizer",
    "save_tokenizer",
]
