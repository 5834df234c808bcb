"""Claims, paired intervals and verdicts on hand-made numbers."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tiedemb.errors import UserError
from tiedemb.experiments.claims import (
    FAILS,
    HOLDS,
    HOLDS_SMALL,
    UNDECIDED,
    UNDECIDED_AFTER_HOLM,
    Difference,
    claim_p_value,
    holm,
    holm_verdict,
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
        (10.0, 80.0, "higher", 50, HOLDS),  # above 0, the margin inside the interval
        (60.0, 80.0, "higher", 50, HOLDS),  # wholly above the margin
        (10.0, 40.0, "higher", 50, HOLDS_SMALL),  # inside (0, margin): real, but smaller than claimed
        (-40.0, 30.0, "higher", 50, FAILS),  # any slowdown is below the margin
        (-40.0, -10.0, "higher", 50, FAILS),  # the other way
        (-40.0, 90.0, "higher", 50, UNDECIDED),  # spans 0 and the margin
        (-0.3, -0.1, "lower", 0.05, HOLDS),
        (-0.04, -0.01, "lower", 0.05, HOLDS_SMALL),
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


def test_a_directional_interval_inside_zero_and_the_margin_gets_one_wording_only():
    decided = verdict(Difference(3, 25.0, 10.0, 40.0), "higher", 50)
    assert decided == HOLDS_SMALL and decided not in (HOLDS, FAILS)


def test_the_claims_p_value_is_the_one_sided_paired_t_test_of_what_holds_asserts():
    # n = 3, mean 2, sd 1: t = 2 / (1 / sqrt 3) = 3.4641; one-sided p with 2 d.f. from the t
    # distribution's closed form for 2 d.f.: p = (1 - t / sqrt(t^2 + 2)) / 2
    t = 2.0 * math.sqrt(3)
    p_upper = (1 - t / math.sqrt(t * t + 2)) / 2
    found = Difference(3, 2.0, 0.0, 0.0, sd=1.0)
    assert claim_p_value(found, "higher", 50) == pytest.approx(p_upper)
    assert claim_p_value(found, "lower", 50) == pytest.approx(1 - p_upper)
    # alike within 5: the worse of "above -5" (t = 12.12) and "below 5" (t = -5.196)
    t_below = (2.0 - 5.0) * math.sqrt(3)
    p_below = (1 + t_below / math.sqrt(t_below * t_below + 2)) / 2
    assert claim_p_value(found, "alike", 5.0) == pytest.approx(p_below)
    assert math.isnan(claim_p_value(Difference(1, 2.0, -math.inf, math.inf), "higher", 50))


def test_holm_adjusts_step_down_on_hand_made_p_values():
    # sorted: 0.001 (x4), 0.01 (x3), 0.02 (x2), 0.04 (x1); made non-decreasing
    assert holm([0.04, 0.001, 0.02, 0.01]) == pytest.approx([0.04, 0.004, 0.04, 0.03])
    assert holm([0.5, 0.3]) == pytest.approx([0.6, 0.6])  # the running maximum keeps the order
    adjusted = holm([0.01, math.nan, 0.02])  # an untested claim is not counted
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)
    assert holm_verdict(HOLDS, 0.004) == HOLDS
    assert holm_verdict(HOLDS, 0.03) == UNDECIDED_AFTER_HOLM  # held raw (p < 0.025), not after
    assert holm_verdict(HOLDS_SMALL, 0.04) == UNDECIDED_AFTER_HOLM
    assert holm_verdict(FAILS, 0.9) == FAILS and holm_verdict(UNDECIDED, 0.2) == UNDECIDED


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


def test_the_analysis_section_reads_back_from_its_record_in_sweep_json():
    analysis = parse_analysis(ANALYSIS, ["clm"], "f")
    assert analysis.claims[0].reference == "untied" and analysis.claims[0].target == 1.0
    recorded = json.loads(json.dumps(dataclasses.asdict(analysis)))  # as write_manifest records it
    assert parse_analysis(recorded, ["clm"], "f") == analysis


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
