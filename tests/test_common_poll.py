"""The one poll-until-deadline loop."""

from __future__ import annotations

import pytest

from edgevllm.common.poll import poll


def test_returns_the_first_answer():
    answers = iter([None, None, "ready"])
    slept: list[float] = []
    assert poll(lambda: next(answers), 10, 0.5, sleep=slept.append) == "ready"
    assert slept == [0.5, 0.5]


def test_gives_none_at_the_deadline_without_oversleeping():
    slept: list[float] = []
    assert poll(lambda: None, 0.0, 5, sleep=slept.append) is None
    assert slept == []


def test_a_check_may_stop_early_by_raising():
    def check():
        raise RuntimeError("the container exited")

    with pytest.raises(RuntimeError, match="exited"):
        poll(check, 10, 0.1)


def test_false_is_an_answer_not_a_retry():
    assert poll(lambda: False, 10, 0.1) is False
