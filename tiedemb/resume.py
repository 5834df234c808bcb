"""The checkpoint callback under the name configs saved by earlier versions use
(``class_path: tiedemb.resume.ResumableCheckpoint``)."""

from tiedemb.training.checkpoints import ResumableCheckpoint

__all__ = ["ResumableCheckpoint"]
