"""The checkpoint callback under the name that configs saved by earlier versions use.

Runs saved their resolved ``config.yaml`` with ``class_path: tiedemb.resume.ResumableCheckpoint``;
the callback now lives in ``tiedemb.training.checkpoints``. This name keeps those files usable
(``python main.py fit --config runs/.../config.yaml``).
"""

from tiedemb.training.checkpoints import ResumableCheckpoint

__all__ = ["ResumableCheckpoint"]
