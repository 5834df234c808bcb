"""Claims, paired intervals and verdicts on hand-made numbers."""

from __future__ import annotations

import math

import pytest

from tiedemb.errors import UserError
from tiedemb.experiments.claims import (
    FAILS,
    HOLDS,
    UNDECIDED,
    Difference,
    analysis_record,
    paired_difference,
    parse_analysis,
    steps_to_target,
    verdict,
)

T_975_DF2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom (from a printed table)


def test_steps_to_target_interpolates_between_the_evaluations_around_the_crossing():
    curve = [(0, 9.0), (50, 8.0), (100, 6.0)]
    assert steps_to_target(curve, 7.0) == pytest.approx(75.0)  # halfway from 8.0 to 6.0
    assert steps_to_target(curve, 8.0) == 50.0  # reached exactly at an evaluation
    assert steps_to_target(curve, 9.5) == 0.0  # already below at the first evaluation
    assert steps_to_target(curve, 5.0) is None  # never


def test_paired_difference_is_the_t_interval_of_the_seedwise_differences():
    level = {"0": 11.0, "1": 22.0, "2": 33.0, "3": 99.0}  # seed 3 has no reference run: not paired
    reference = {"0": 10.0, "1": 20.0, "2": 30.0}
    found = paired_difference(level, reference)
    # differences 1, 2, 3: mean 2, sample sd 1
    half = T_975_DF2 * 1.0 / math.sqrt(3)
    assert (found.n, found.mean) == (3, pytest.approx(2.0))
    assert (found.low, found.high) == (pytest.approx(2.0 - half), pytest.approx(2.0 + half))


def test_pairing_removes_what_the_seeds_share():
    # Seeds differ by far more than the variants do; paired, the small constant gap is certain.
    level = {"0": 5.01, "1": 6.01, "2": 7.01}
    reference = {"0": 5.0, "1": 6.0, "2": 7.0}
    found = paired_difference(level, reference)
    assert found.low == pytest.approx(0.01) and found.high == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("low", "high", "expect", "margin", "decided"),
    [
        (-0.02, 0.03, "alike", 0.05, HOLDS),
        (0.06, 0.20, "alike", 0.05, FAILS),
        (-0.30, -0.10, "alike", 0.05, FAILS),
        (-0.02, 0.09, "alike", 0.05, UNDECIDED),  # the interval spans the margin
        (10.0, 80.0, "higher", 50, HOLDS),
        (-40.0, 30.0, "higher", 50, FAILS),  # any slowdown is below the margin
        (-40.0, 90.0, "higher", 50, UNDECIDED),
        (-0.3, -0.1, "lower", 0.05, HOLDS),
        (-0.01, 0.2, "lower", 0.05, FAILS),
        (-0.2, 0.1, "lower", 0.05, UNDECIDED),
    ],
)
def test_verdicts_follow_from_the_interval_and_the_margin(low, high, expect, margin, decided):
    assert verdict(Difference(3, (low + high) / 2, low, high), expect, margin) == decided


def test_one_seed_or_lower_bounds_decide_little():
    assert verdict(Difference(1, 0.0, -math.inf, math.inf), "alike", 0.05) == UNDECIDED
    # a level that never reached the target: its steps are lower bounds, which can only show "higher"
    assert verdict(Difference(3, 100.0, 50.0, 150.0, bound_only=True), "higher", 50) == HOLDS
    assert verdict(Difference(3, 0.0, -10.0, 10.0, bound_only=True), "alike", 50) == UNDECIDED


ANALYSIS = {
    "axis": "variant",
    "reference": "tied_orth",
    "targets": [0.5, 1.0],
    "claims": [
        {
            "text": "scaled is slowest",
            "study": "clm",
            "levels": ["tied_scaled_init"],
            "metric": "steps",
            "target": 1.0,
            "expect": "higher",
            "margin": 50,
            "reference": "untied",
        }
    ],
}


def test_the_analysis_section_reads_back_from_its_record():
    analysis = parse_analysis(ANALYSIS, ["clm"], "f")
    assert analysis.claims[0].reference == "untied" and analysis.claims[0].target == 1.0
    assert parse_analysis(analysis_record(analysis), ["clm"], "f") == analysis


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"study": "nope"}, "study 'nope' is not in the file"),
        ({"metric": "accuracy"}, "metric='accuracy' is not one of"),
        ({"expect": "faster"}, "expect='faster' is not one of"),
        ({"target": 2.0}, "target=2 is not one of the analysis targets"),
        ({"expect": "alike", "margin": 0}, "margin=0 must be positive"),
        ({"colour": "red"}, "unknown key 'colour'"),
    ],
)
def test_a_mistaken_claim_is_one_message_naming_it(change, message):
    claim = {**ANALYSIS["claims"][0], **change}
    with pytest.raises(UserError, match=message):
        parse_analysis({**ANALYSIS, "claims": [claim]}, ["clm"], "f")
