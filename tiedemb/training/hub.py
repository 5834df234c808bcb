"""Whether the Hugging Face hub and the W&B server can be used, answered within seconds (without a probe,
a machine with no network spends close to a minute in the clients' retries). W&B goes offline without
credentials, or when the server does not answer (said in one line); a ``WANDB_MODE`` set is kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tiedemb.errors import first_line

HUB_PROBE_TIMEOUT_S = WANDB_PROBE_TIMEOUT_S = 3.0
DEFAULT_BASE_URL = "https://api.wandb.ai"
_TRUE = {"1", "ON", "YES", "TRUE"}


def spelled_as_path(text: str) -> bool:
    """Whether a name is spelled as a local path (``./x``, ``/x``, ``~/x``, ``a/b/c``), not as a hub name."""
    return text.startswith((".", "/", "~")) or os.sep in text.rstrip(os.sep) and text.count("/") > 1


def hub_offline_requested() -> bool:
    """Whether the user asked for offline mode: ``HF_HUB_OFFLINE=1`` (or an older alias) or the flag set."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    if any(os.environ.get(name, "").upper() in _TRUE for name in names):
        return True
    from huggingface_hub import constants

    # datasets keeps its own copy of the flag, read when it is imported; only a loaded one can be set.
    datasets_config = sys.modules.get("datasets.config")
    return bool(constants.HF_HUB_OFFLINE or getattr(datasets_config, "HF_HUB_OFFLINE", False))


def url_problem(url: str, timeout: float) -> str | None:
    """Why ``url`` cannot be reached, or ``None`` when it answers (any HTTP status; proxies as the clients')."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # an HTTP answer of any status means the server is there
    except (OSError, ValueError) as error:
        return f"{url} is unreachable ({first_line(error)})"
    return None


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Probe the hub endpoint once, quickly."""
    from huggingface_hub import constants

    return url_problem(constants.ENDPOINT, timeout) is None


@contextlib.contextmanager
def hub_access() -> Iterator[bool]:
    """Yields True where hub loaders reach the hub; else (asked for, or unreachable) switches on the offline
    flags of ``huggingface_hub`` and ``datasets`` for the duration (they read ``HF_HUB_OFFLINE`` at import)."""
    if not hub_offline_requested() and hub_reachable():
        yield True
        return
    import datasets.config
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield False
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def server_problem(timeout: float = WANDB_PROBE_TIMEOUT_S) -> str | None:
    """Why the W&B server cannot be reached, or ``None`` when it answers."""
    problem = url_problem(os.environ.get("WANDB_BASE_URL", DEFAULT_BASE_URL), timeout)
    return f"the W&B server {problem}" if problem else None


def wandb_mode() -> str | None:
    """``"offline"`` where a run cannot go online; None where W&B decides: a ``WANDB_MODE`` the user set,
    or credentials and a server that answers (W&B then prints the run's URL)."""
    if "WANDB_MODE" in os.environ:
        return None
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    host = os.environ.get("WANDB_BASE_URL", DEFAULT_BASE_URL).split("://")[-1].split("/")[0]
    if not os.environ.get("WANDB_API_KEY") and not (netrc.is_file() and host in netrc.read_text(errors="ignore")):
        return "offline"  # no credentials
    problem = server_problem()
    if problem is not None:
        print(f"{problem}: W&B records this run offline; upload it later with `wandb sync`", file=sys.stderr)
        return "offline"
    return None


def make_wandb_folders(loggers: Sequence[Any]) -> None:
    """Make each W&B logger's save folder before its run starts (W&B warns when it is missing)."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger.save_dir:
            os.makedirs(logger.save_dir, exist_ok=True)
