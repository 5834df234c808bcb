"""tiedemb: tied input/output embeddings and embedding width in Transformer encoders."""

from tiedemb.modules.glue import GlueModule
from tiedemb.modules.pretrain import PretrainModule

__all__ = ["GlueModule", "PretrainModule"]
