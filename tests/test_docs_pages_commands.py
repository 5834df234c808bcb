"""Every command docs/*.md shows runs as written, but docs/experiments.md's after its opening
(those run beside README.md's, in ``test_docs_commands.py``).

A file of its own so that a test worker runs these beside README.md's; how a command is found,
shrunk and run: ``documented_commands``.
"""

from __future__ import annotations

import pytest
from documented_commands import DocCommand, Workspace, check_command, params


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("docs"))


def test_docs_pages_have_commands() -> None:
    assert params("pages"), "no command found in docs/*.md: the extractor or the folder changed"


@pytest.mark.parametrize("command", params("pages"))
def test_docs_page_command_runs(command: DocCommand, workspace: Workspace) -> None:
    check_command(command, workspace)
