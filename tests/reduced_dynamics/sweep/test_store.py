"""The content-addressed store: keys hash the full configuration and version; damaged records are not trusted."""

import json

import pytest

from reduced_dynamics.sweep import Store
from reduced_dynamics.sweep.commands import run_point, validate


def _record(tmp_path):
    inv = validate("run", {"t_end": 1.0, "n_eval": 5, "d": 3, "L": 10, "method": "RK45", "rtol": 1e-6})
    store = Store(tmp_path)
    rec = store.put(inv, run_point(inv.argv))
    return store, inv, rec


def test_round_trip(tmp_path):
    store, inv, rec = _record(tmp_path)
    assert rec["status"] == "done" and rec["exit_code"] == 0
    assert store.get(inv.key) == rec
    assert store.path(inv.key).name == f"{inv.key}.json"
    assert [r["key"] for r in store.records()] == [inv.key]


@pytest.mark.parametrize("damage", ["truncate", "edit", "empty", "other_key"])
def test_damaged_record_is_not_trusted(tmp_path, damage):
    store, inv, rec = _record(tmp_path)
    p = store.path(inv.key)
    raw = p.read_bytes()
    if damage == "truncate":
        p.write_bytes(raw[: len(raw) // 2])
    elif damage == "edit":  # valid JSON, a result changed by hand: the checksum no longer matches
        d = json.loads(raw)
        d["result"]["gamma"] = 0.5
        p.write_text(json.dumps(d))
    elif damage == "empty":
        p.write_bytes(b"")
    else:  # a whole record under another point's name
        d = json.loads(raw)
        d["key"] = "0" * 64
        p.write_text(json.dumps(d))
    assert store.get(inv.key) is None
    assert store.is_corrupt(inv.key)
    assert store.records() == []


def test_key_hashes_the_parsed_configuration():
    base = validate("run", {"t_end": 10.0, "d": 3})
    # spelling, int vs float and explicitly given defaults do not change the configuration
    assert validate("run", {"t-end": 10, "d": 3}).key == base.key
    assert validate("run", {"t_end": 10.0, "d": 3, "L": 40, "heads": 2}).key == base.key
    # any value that changes the result does
    assert validate("run", {"t_end": 10.0, "d": 3, "seed": 1}).key != base.key
    assert validate("run", {"t_end": 10.0, "d": 3, "rtol": 1e-7}).key != base.key
    # the configuration holds every option of the command (defaults included), so a new option is hashed too
    assert {"L", "sigma2", "heads", "method", "rtol", "atol", "n_eval", "seed", "init"} <= set(base.config)
    assert "json" not in base.config and "out" not in base.config


def test_key_includes_the_package_version(monkeypatch):
    import reduced_dynamics

    k0 = validate("run", {"t_end": 10.0}).key
    monkeypatch.setattr(reduced_dynamics, "__version__", "9.9.9")
    assert validate("run", {"t_end": 10.0}).key != k0


def test_stale_temporary_files_are_removed_only_when_old(tmp_path):
    import os
    import time

    store, inv, _ = _record(tmp_path)
    folder = store.path(inv.key).parent
    old, fresh = folder / f".{inv.key}.json.abc.tmp", folder / f".{inv.key}.json.def.tmp"
    old.write_text('{"half')
    fresh.write_text('{"half')
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert store.get(inv.key) is not None and len(store.records()) == 1  # never read as records
    assert store.clean_stale() == 1
    assert not old.exists() and fresh.exists()  # a fresh one may be a concurrent sweep's write in progress
