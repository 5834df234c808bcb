"""The smallest real run the end-to-end tests start from: configs/tied.yaml on configs/scale/tiny.yaml.

A test adds its own trainer, data and logger arguments after ``TINY_TIED``; the two configs are the
part every such run shares, so a change of recipe (a renamed config) is made here once.
"""

from __future__ import annotations

from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

TINY_TIED = ("--config", str(CONFIGS / "tied.yaml"), "--config", str(CONFIGS / "scale" / "tiny.yaml"))
"""The ``--config`` arguments of a tiny tied model (made-up text unless the test names other data)."""
