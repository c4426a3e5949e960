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


# ----------------------------------------------------------------------------- issue 23: checksummed but malformed

MALFORMED = {
    "no_status": lambda d: d.pop("status"),
    "config_a_list": lambda d: d.update(config=[1, 2]),
    "params_a_string": lambda d: d.update(params="L=4"),
    "status_unknown": lambda d: d.update(status="maybe"),
    "done_without_result": lambda d: d.update(result=None),
    "argv_numbers": lambda d: d.update(argv=[1, 2]),
    "error_a_dict": lambda d: d.update(error={"x": 1}),
    "seconds_a_string": lambda d: d.update(seconds="fast"),
}


@pytest.mark.parametrize("damage", list(MALFORMED))
def test_a_checksummed_record_of_the_wrong_structure_is_not_trusted(tmp_path, damage):
    """A record whose checksum is valid but whose structure is not the store's (no `status`, `config` a list, ...)
    crashed `sweep` and `sweep-table` with a KeyError traceback: it counts as corrupted (recomputed, not in the
    table)."""
    from reduced_dynamics.sweep.store import _checksum
    from reduced_dynamics.sweep.table import table_rows

    store, inv, rec = _record(tmp_path)
    p = store.path(inv.key)
    d = json.loads(p.read_bytes())
    MALFORMED[damage](d)
    d["checksum"] = _checksum(d)
    p.write_text(json.dumps(d))
    assert store.get(inv.key) is None and store.is_corrupt(inv.key) and store.records() == []
    assert table_rows(store.records())[1] == []


@pytest.mark.parametrize("content", [False, True], ids=["empty", "with_a_file"])
def test_a_folder_where_a_record_belongs_makes_room_and_keeps_its_content(tmp_path, content):
    """A folder at a record's path aborted the sweep (the rename onto it failed): an empty one is removed, one with
    content is renamed `<key>.json.displaced` (nothing the store did not write is deleted), and the record is
    written."""
    store, inv, rec = _record(tmp_path)
    p = store.path(inv.key)
    p.unlink()
    p.mkdir()
    if content:
        (p / "keep.txt").write_text("mine")
    assert store.get(inv.key) is None and store.is_corrupt(inv.key)
    again = store.put(inv, run_point(inv.argv))
    assert store.get(inv.key) == again and p.is_file()
    if content:
        assert (p.parent / f"{p.name}.displaced" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("manifest", ["[1, 2]", '"text"', '{"axes": 3}'])
def test_a_malformed_manifest_is_skipped(tmp_path, manifest):
    store, inv, rec = _record(tmp_path)
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "bad.json").write_text(manifest)
    assert "bad" not in store.manifests()
    from reduced_dynamics.sweep.table import write_table

    assert write_table(tmp_path).csv  # no traceback
