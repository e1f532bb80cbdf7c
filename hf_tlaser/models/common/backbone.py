"""A pretrained Hugging Face encoder in place of a family's own layers (``config.backbone``, ``hf-tlaser train
--init-from``), the projection head of a distilled encoder (``config.teacher_dim``), and the encoder forward that
T-LASER and LDT share: own layers or backbone, then projection, pooling and the carried modules."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModel, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .encode import warn_repeated_prompt
from .pooling import head_vectors, pool_hidden


def projection_head(config) -> torch.nn.Linear | None:
    """The projection head of an encoder distilled from a wider or narrower teacher: ``hidden_size`` ->
    ``config.teacher_dim``; None without one."""
    dim = getattr(config, "teacher_dim", None)
    return None if dim is None else torch.nn.Linear(config.hidden_size, dim)


def project_hidden(head: torch.nn.Linear | None, hidden: torch.Tensor, project: bool = True) -> torch.Tensor:
    """Every final hidden state through the projection head (before pooling: for CLS and mean pooling the same as
    projecting the pooled vector); unchanged without a head or with ``project=False``."""
    return hidden if head is None or not project else head(hidden)


def backbone_config(config):
    """The pretrained encoder's config nested in ``config.backbone`` (a ``to_dict()`` with its ``model_type``), or
    None for a model with its own encoder layers."""
    values = dict(getattr(config, "backbone", None) or {})
    if not values:
        return None
    return AutoConfig.for_model(values.pop("model_type"), **values)


def build_backbone(config) -> PreTrainedModel | None:
    """The pretrained encoder of ``config.backbone`` (``hf-tlaser train --init-from``), built from its config
    without weights (``from_pretrained`` or the training run load them) and without a pooler: the member pools. None
    without a backbone."""
    nested = backbone_config(config)
    if nested is None:
        return None
    try:
        return AutoModel.from_config(nested, add_pooling_layer=False)
    except TypeError:  # an encoder class without a pooler option
        return AutoModel.from_config(nested)


def backbone_states(
    backbone: PreTrainedModel, input_ids: torch.LongTensor, attention_mask: torch.Tensor, output_hidden_states: bool
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """The backbone's final hidden states [B, S, d] (and with ``output_hidden_states`` the embeddings' and every
    layer's output)."""
    out = backbone(
        input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden_states, return_dict=True
    )
    return out.last_hidden_state, out.hidden_states if output_hidden_states else None


class BackboneEncoderMixin:
    """A sentence encoder whose final states come from its own layers (``encoder_states``, the paper's) or from
    ``self.backbone`` (``build_backbone``), then go through ``self.projection`` (``projection_head``), pooling
    (``config.pooling``) and ``self.sentence_head`` (the carried modules, ``sentence_head``)."""

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed_tokens if self.backbone is None else self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: torch.nn.Embedding) -> None:
        if self.backbone is None:
            self.embed_tokens = value
        else:
            self.backbone.set_input_embeddings(value)

    def sentence_outputs(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None,
        output_hidden_states: bool | None,
        return_dict: bool | None,
        project: bool,
        **layer_kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        """The encoder forward: ``last_hidden_state`` (projected with ``project``), ``pooler_output`` (through the
        carried modules; a trailing ``Normalize`` only with ``project``) and with ``output_hidden_states`` every
        layer's states. ``layer_kwargs`` go to ``encoder_states``."""
        output_hidden_states = bool(output_hidden_states)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        warn_repeated_prompt(self, input_ids)
        if attention_mask is None:
            attention_mask = input_ids.ne(self.config.pad_token_id)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            if self.backbone is None:
                hidden, hidden_states = self.encoder_states(
                    input_ids, attention_mask, output_hidden_states, **layer_kwargs
                )
            else:
                hidden, hidden_states = backbone_states(self.backbone, input_ids, attention_mask, output_hidden_states)
            hidden = project_hidden(self.projection, hidden, project)
            pooled = pool_hidden(hidden, attention_mask, self.config.pooling)
            pooled = head_vectors(self.sentence_head, pooled, unit=project)
        if not return_dict:
            return tuple(v for v in (hidden, pooled, hidden_states) if v is not None)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=pooled, hidden_states=hidden_states)
