"""No network: the default W&B logger records offline without prompting or waiting, with or
without credentials. Credentials in the environment never reach saved configs, logs or checkpoints.

Both runs are the real command line with the default loggers, in subprocesses with the
network switched off (a new network namespace via `unshare -rn`; where that is not allowed,
every proxy variable points at a closed port), started together to share their start-up time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_runs import TINY_TIED

pytestmark = pytest.mark.end_to_end  # runs the real command line

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
FAKE_SECRETS = {
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef0f1e2d3c",  # 40 characters, like a real key
    "HF_TOKEN": "hf_tiedembFakeToken0123456789abcdefXYZ",
    "HUGGING_FACE_HUB_TOKEN": "hf_tiedembOtherFakeToken9876543210QRS",
}


def network_off_prefix() -> tuple[list[str], dict[str, str]]:
    """A command prefix and environment under which no connection can succeed."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-rn"], {}
    closed = "http://127.0.0.1:9"
    return [], dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"), closed)


def start_run(folder: Path, extra_env: dict[str, str]) -> tuple[subprocess.Popen, float]:
    prefix, proxy_env = network_off_prefix()
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WANDB_", "HF_", "HUGGING_FACE")) and k.lower() not in ("http_proxy", "https_proxy")
    }
    env = {
        **clean,
        **proxy_env,
        "HOME": str(folder),
        "NETRC": str(folder / "no-netrc"),
        "OMP_NUM_THREADS": "1",
        **extra_env,
    }
    command = [
        *prefix,
        sys.executable,
        str(ROOT / "main.py"),
        "fit",
        *TINY_TIED,
        "--trainer.max_steps=2",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={folder / 'runs'}",
    ]
    folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        command,
        env=env,
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, time.monotonic()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, float, Path]]:
    """Both runs, started together: one with no credentials at all, one with fake ones."""
    folders = {
        "no_credentials": tmp_path_factory.mktemp("offline"),
        "fake_credentials": tmp_path_factory.mktemp("secrets"),
    }
    started = {
        "no_credentials": start_run(folders["no_credentials"], {}),
        # with a key the W&B server is probed once; unreachable, the run must go offline by itself
        "fake_credentials": start_run(folders["fake_credentials"], FAKE_SECRETS),
    }
    finished = {}
    for name, (process, start) in started.items():
        try:
            stdout, stderr = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        finished[name] = (result, time.monotonic() - start, folders[name])
    return finished


def test_default_logger_runs_offline_without_network_or_credentials(runs):
    result, _, folder = runs["no_credentials"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(folder.rglob("offline-run-*")), "W&B did not record the run offline"
    assert list(folder.rglob("last.ckpt")), "the run wrote no checkpoint"


def test_credentials_never_reach_configs_logs_or_checkpoints(runs):
    result, _, folder = runs["fake_credentials"]
    assert result.returncode == 0, result.stderr[-3000:]
    written = [path for path in folder.rglob("*") if path.is_file()]
    assert any(path.suffix == ".ckpt" for path in written) and any(path.name.startswith("config") for path in written)
    for name, secret in FAKE_SECRETS.items():
        assert secret not in result.stdout + result.stderr, f"{name} was printed"
        leaks = [str(path) for path in written if secret.encode() in path.read_bytes()]
        assert not leaks, f"{name} was written to {leaks}"


def test_with_credentials_and_no_network_the_run_goes_offline_and_says_so(runs):
    result, _, folder = runs["fake_credentials"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "W&B records this run offline; upload it later with `wandb sync`" in result.stderr
    assert list(folder.rglob("offline-run-*")), "W&B did not record the run offline"
