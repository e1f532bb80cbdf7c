"""hf_tlaser: T-LASER / cT-LASER multilingual sentence and document embeddings for Hugging Face Transformers."""

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForSeq2SeqLM

from hf_tlaser.encoding import encode
from hf_tlaser.losses import distance_constraint_loss
from hf_tlaser.models.cnv import CNVConfig, CNVModel
from hf_tlaser.models.laser import LaserConfig, LaserForTranslation, LaserModel
from hf_tlaser.models.ldt import LDTConfig, LDTForAlignment, LDTModel
from hf_tlaser.models.tlaser import TLaserConfig, TLaserForTranslation, TLaserModel
from hf_tlaser.models.yu2018 import Yu2018Config, Yu2018ForTranslation, Yu2018Model
from hf_tlaser.tokenization import save_tokenizer, train_tokenizer
from hf_tlaser.version import __version__ as __version__

for _config, _model, _translation in (
    (TLaserConfig, TLaserModel, TLaserForTranslation),
    (LaserConfig, LaserModel, LaserForTranslation),
    (Yu2018Config, Yu2018Model, Yu2018ForTranslation),
):
    AutoConfig.register(_config.model_type, _config, exist_ok=True)
    AutoModel.register(_config, _model, exist_ok=True)
    AutoModelForSeq2SeqLM.register(_config, _translation, exist_ok=True)
AutoConfig.register(CNVConfig.model_type, CNVConfig, exist_ok=True)
AutoModel.register(CNVConfig, CNVModel, exist_ok=True)
AutoConfig.register(LDTConfig.model_type, LDTConfig, exist_ok=True)
AutoModel.register(LDTConfig, LDTModel, exist_ok=True)
AutoModelForPreTraining.register(LDTConfig, LDTForAlignment, exist_ok=True)

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
    "train_tokenizer",
    "save_tokenizer",
]
