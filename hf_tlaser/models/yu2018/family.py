"""Yu 2018 (Yu, Li & Oguz): an LSTM seq2seq with a similarity loss, translating both ways."""

from transformers import AutoModelForSeq2SeqLM

from hf_tlaser.models.family import Family

from .configuration_yu2018 import Yu2018Config
from .modeling_yu2018 import Yu2018ForTranslation, Yu2018Model

FAMILY = Family(
    model_type="yu2018",
    config_class=Yu2018Config,
    model_class=Yu2018Model,
    head_class=Yu2018ForTranslation,
    head_auto=AutoModelForSeq2SeqLM,
    pooling="mean",
    display_name=lambda config: "Yu 2018",
    language_table=True,
    translates_back=True,
)
