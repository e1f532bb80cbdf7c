from .configuration_yu2018 import Yu2018Config
from .modeling_yu2018 import Yu2018ForTranslation, Yu2018Model, Yu2018PreTrainedModel, Yu2018TranslationOutput

__all__ = ["Yu2018Config", "Yu2018Model", "Yu2018ForTranslation", "Yu2018PreTrainedModel", "Yu2018TranslationOutput"]
