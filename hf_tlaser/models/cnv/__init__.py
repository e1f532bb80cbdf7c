from .configuration_cnv import CNVConfig
from .modeling_cnv import CNVModel, CNVOutput, CNVPreTrainedModel, SelfAttentiveSummary, cnv_distance_loss

__all__ = ["CNVConfig", "CNVModel", "CNVOutput", "CNVPreTrainedModel", "SelfAttentiveSummary", "cnv_distance_loss"]
