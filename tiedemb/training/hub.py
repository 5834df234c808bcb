"""Whether the Hugging Face hub can be used, answered within seconds (without a probe, a machine with no
network spends close to a minute in the hub clients' retries); asked before anything reaches for the hub.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from tiedemb.errors import first_line

HUB_PROBE_TIMEOUT_S = 3.0
_TRUE = {"1", "ON", "YES", "TRUE"}


def spelled_as_path(text: str) -> bool:
    """Whether a name is spelled as a local path (``./x``, ``/x``, ``~/x``, ``a/b/c``), not as a hub
    ``name`` or ``org/name``: such a name that does not exist is a missing folder, not a hub lookup."""
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
    """Why ``url`` cannot be reached, or ``None`` when it answers (any HTTP status will do; ``urllib`` goes
    wherever the clients' own requests go, proxies included)."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # an HTTP answer of any status means the server is there
    except (OSError, ValueError) as error:
        return f"{url} is unreachable ({first_line(error)})"
    return None


def hub_problem(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why the hub endpoint cannot be reached, or ``None`` when it answers."""
    from huggingface_hub import constants

    return url_problem(constants.ENDPOINT, timeout)


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Probe the hub endpoint once, quickly."""
    return hub_problem(timeout) is None


@contextlib.contextmanager
def hub_access() -> Iterator[bool]:
    """Context in which hub loaders either reach the hub or read only the local cache.

    Yields True when online. When offline (asked for, or the hub is unreachable), the offline
    flags of ``huggingface_hub`` and ``datasets`` are switched on for the duration, because
    they are read once at import and so do not see ``HF_HUB_OFFLINE`` set afterwards.
    """
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
