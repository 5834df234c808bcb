"""``run_if`` marks: skipped exactly when a named need is missing, the reason naming it."""

from __future__ import annotations

from run_if import run_if


def test_a_missing_package_skips_and_names_itself():
    mark = run_if(packages=["tiedemb_no_such_package"])
    assert mark.args == (True,)
    assert mark.kwargs["reason"] == "needs the tiedemb_no_such_package package (pip install tiedemb-no-such-package)"


def test_an_installed_package_runs_and_its_absence_is_what_skips():
    assert run_if(packages=["torch"]).args == (False,)
    mark = run_if(without_packages=["torch"])
    assert mark.args == (True,) and mark.kwargs["reason"] == "checks a machine without the torch package"


def test_every_missing_need_is_named():
    mark = run_if(min_cuda_devices=99, packages=["tiedemb_no_such_package"])
    assert mark.args == (True,)
    assert mark.kwargs["reason"].startswith("needs 99 CUDA GPUs, found ")
    assert "tiedemb_no_such_package" in mark.kwargs["reason"]
