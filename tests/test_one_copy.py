"""Run plumbing is written once: one next-free-name helper, one hub probe, one user-error exit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tiedemb"

# job -> (what code doing that job looks like, the one file allowed to hold it)
ONE_HOME = {
    "the next free file name": (re.compile(r"\{stem\}-\{|-\{(?:index|attempt|number|n|i)\}"), "training/files.py"),
    "a hub probe": (re.compile(r"\burlopen\(|\bcreate_connection\(|\bsocket\.socket\("), "training/hub.py"),
    "the user-error exit": (re.compile(r"print\(f[\"']error: \{|[\"']TIEDEMB_DEBUG[\"']"), "training/exits.py"),
}
HELPERS = (
    "numbered_names",
    "first_free",
    "write_new_file",
    "url_problem",
    "hub_reachable",
    "hub_access",
    "hub_offline_requested",
    "find_user_error",
    "report_user_errors",
    "atomic_write",
    "first_line",
)


def package_files() -> dict[str, str]:
    return {path.relative_to(PACKAGE).as_posix(): path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py")}


@pytest.mark.parametrize("job", ONE_HOME)
def test_a_job_is_done_in_one_file_only(job):
    pattern, home = ONE_HOME[job]
    holders = sorted(name for name, text in package_files().items() if pattern.search(text))
    assert holders == [home], f"{job} is written in {holders}; use tiedemb/{home}"


def test_every_shared_helper_is_defined_once():
    for helper in HELPERS:
        definitions = [name for name, text in package_files().items() if re.search(rf"^def {helper}\(", text, re.M)]
        assert len(definitions) == 1, f"{helper} is defined in {definitions}"
