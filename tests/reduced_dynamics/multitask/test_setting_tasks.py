"""Setting.tasks: validation, immutability, identity, to_dict/replace; the default stays the single task."""

from __future__ import annotations

import pytest

from reduced_dynamics import Setting


def test_default_is_single_task_and_dict_unchanged():
    s = Setting()
    assert s.tasks is None and s.n_tasks == 1 and s.supports == (tuple(range(5)),)
    assert "tasks" not in s.to_dict()


@pytest.mark.parametrize(
    "tasks, stored",
    [
        ([[3, 0, 1, 2], [2, 3, 4, 5]], ((0, 1, 2, 3), (2, 3, 4, 5))),  # overlapping, sorted
        ([range(6), [1, 2]], ((0, 1, 2, 3, 4, 5), (1, 2))),  # nested
        ([[0, 1], [2], [3, 4, 5]], ((0, 1), (2,), (3, 4, 5))),  # disjoint, three tasks
    ],
)
def test_tasks_stored_sorted_and_round_trip(tasks, stored):
    s = Setting(d=6, tasks=tasks)
    assert s.tasks == stored and s.n_tasks == len(stored)
    again = Setting(**s.to_dict())
    assert again == s and hash(again) == hash(s)
    assert s.replace(L=80).tasks == stored and s.replace(tasks=None).tasks is None
    assert "tasks=" in repr(s)


def test_tasks_change_identity():
    assert Setting(d=6, tasks=[[0, 1]]) != Setting(d=6, tasks=[[0, 2]]) != Setting(d=6)


def test_tasks_immutable():
    s = Setting.paper_multitask()
    with pytest.raises(AttributeError):
        s.tasks = ((0,),)
    assert isinstance(s.tasks, tuple) and all(isinstance(t, tuple) for t in s.tasks)


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"tasks": []}, "empty sequence"),
        ({"tasks": [[]]}, "task 0 is empty"),
        ({"tasks": [[0, 6]]}, "index 6"),
        ({"tasks": [[-1]]}, "index -1"),
        ({"tasks": [[0, 0]]}, "twice"),
        ({"tasks": [[0, 1], [1, 0]]}, "repeats task 0"),
        ({"tasks": "01"}, "`tasks`"),
        ({"tasks": [[1.0]]}, "index 1.0"),
        ({"tasks": [[True]]}, "index True"),
        ({"d": [5, 6], "tasks": [[0]]}, "scalar `d`"),
    ],
)
def test_bad_tasks_raise_naming_field(changes, match):
    kw = {"d": 6, **changes}
    with pytest.raises(ValueError, match=match) as info:
        Setting(**kw)
    assert "`tasks`" in str(info.value)
