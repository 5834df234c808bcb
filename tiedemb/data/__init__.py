"""LightningDataModules: pretraining text (or the embedded corpus) and GLUE."""

from tiedemb.data.glue import GlueData
from tiedemb.data.pretrain import PretrainData

__all__ = ["GlueData", "PretrainData"]
