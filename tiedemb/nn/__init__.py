"""Plain PyTorch building blocks: no Lightning, no data, no files."""

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.heads import HEADS
from tiedemb.nn.model import IGNORE_INDEX, LMOutput, Transformer

__all__ = ["HEADS", "IGNORE_INDEX", "LMOutput", "Transformer", "TransformerConfig"]
