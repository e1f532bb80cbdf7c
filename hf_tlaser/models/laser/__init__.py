from .configuration_laser import LaserConfig
from .modeling_laser import LaserForTranslation, LaserModel, LaserPreTrainedModel

__all__ = ["LaserConfig", "LaserModel", "LaserForTranslation", "LaserPreTrainedModel"]
