from .configuration_tlaser import TLaserConfig
from .modeling_tlaser import TLaserForTranslation, TLaserModel, TLaserPreTrainedModel

__all__ = ["TLaserConfig", "TLaserModel", "TLaserForTranslation", "TLaserPreTrainedModel"]
