"""The sweep specification: a small TOML file naming a command, fixed parameters, axes and seeds.

.. code-block:: toml

    command = "train"                     # run, risk, train, check (and new commands as they land)
    name = "trained_risk_vs_L"            # optional; default: the file's stem
    seeds = [0, 1, 2]                     # or seeds = 3 (0, 1, 2); the command's --seed

    [fixed]                               # the same for every point
    d = 5
    steps = 20000

    [axes]                                # the grid: every combination of these
    heads = [1, 2, 3, 4]                  # a list
    L = { range = [10, 50, 10] }          # integers start, stop (excluded), step: 10 20 30 40
    sigma2 = { logspace = [0.01, 1, 5] }  # 5 log-spaced values from 0.01 to 1 (endpoints included)
    lr = { linspace = [1e-3, 3e-3, 3] }   # 3 evenly spaced values

    [[zip]]                               # axes varied together (equal lengths), crossed with the rest
    d = [2, 5]
    L = [8, 40]

    [quick]                               # --quick: these replace the tables above, key by key
    seeds = [0]
    fixed = { steps = 200 }
    axes = { heads = [1, 2], L = [8, 16] }

Parameter names are the command's options without ``--`` (``t-end`` or
``t_end``); a switch (``--conditional``) takes ``true``/``false``; a list value
in ``fixed`` is passed in the one comma-separated list syntax. An integer option
given log-spaced values gets them rounded (duplicates after rounding are an
error). The grid is the product of the axes, each zip group and the seeds, in
the order written (the last varies fastest).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Mapping

from reduced_dynamics._results import FrozenResult

__all__ = ["SweepSpec", "load_spec"]

_TOP_KEYS = {"command", "name", "seeds", "fixed", "axes", "zip", "quick", "description"}
_QUICK_KEYS = {"seeds", "fixed", "axes", "zip"}
#: more points than this in one sweep is refused (a typo in a range, not a grid)
MAX_POINTS = 1_000_000


def _err(where: str, text: str) -> ValueError:
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in where):  # a key of control characters: shown escaped,
        where = repr(where)[1:-1]  # on the one error line (a newline cut it; an escape sequence reached the terminal)
    return ValueError(f"`{where}` {text}")


def _number(where, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _err(where, f"must hold finite numbers, got {v!r}")
    return v


def _check_count(where: str, n: int) -> None:
    """Refuse an axis of more than :data:`MAX_POINTS` values before its list is built."""
    if n > MAX_POINTS:
        raise _err(where, f"makes {n} values, more than the {MAX_POINTS} points a sweep may have")


def _expand_axis(name: str, value, *, is_int: bool) -> list:
    """The values of one axis: a list, or a one-key table ``range``/``linspace``/``logspace``."""
    where = f"axes.{name}"
    if isinstance(value, list):
        vals = list(value)
    elif isinstance(value, Mapping):
        if len(value) != 1 or next(iter(value)) not in ("range", "linspace", "logspace"):
            raise _err(
                where,
                f"must be a list or one of {{range = [...]}}, {{linspace = [...]}}, {{logspace = [...]}}, got {dict(value)!r}",
            )
        kind, args = next(iter(value.items()))
        if not isinstance(args, list) or len(args) != 3:
            raise _err(
                where,
                f"{kind} needs three numbers [start, stop, {'step' if kind == 'range' else 'count'}], got {args!r}",
            )
        a, b, c = (_number(where, x) for x in args)
        if kind == "range":
            if not all(isinstance(x, int) for x in (a, b, c)) or c == 0:
                raise _err(where, f"range needs integers [start, stop, step] with step != 0, got {args!r}")
            _check_count(where, len(range(a, b, c)))  # arithmetic: the list is built only if it is small enough
            vals = list(range(a, b, c))
        else:
            if not isinstance(c, int) or c < 1:
                raise _err(where, f"{kind} needs a count >= 1 as its third number, got {c!r}")
            _check_count(where, c)
            if kind == "logspace" and (a <= 0 or b <= 0):
                raise _err(where, f"logspace needs positive endpoints, got {args!r}")
            if c == 1:
                vals = [float(a)]
            elif kind == "linspace":
                vals = [a + (b - a) * k / (c - 1) for k in range(c)]
            else:
                la, lb = math.log(a), math.log(b)
                vals = [math.exp(la + (lb - la) * k / (c - 1)) for k in range(c)]
                vals[0], vals[-1] = float(a), float(b)
            if is_int:
                vals = [int(round(v)) for v in vals]
    else:
        raise _err(where, f"must be a list or a range/linspace/logspace table, got {value!r}")
    if not vals:
        raise _err(where, "is empty: an axis needs at least one value")
    if len({repr(v) for v in vals}) != len(vals):
        raise _err(where, f"has repeated values {vals!r}")
    return vals


def _seeds(value) -> list[int]:
    if isinstance(value, bool):
        raise _err("seeds", f"must be a count >= 1 or a non-empty list of integers >= 0, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise _err("seeds", f"must be a count >= 1 or a non-empty list of integers >= 0, got {value!r}")
        _check_count("seeds", value)
        return list(range(value))
    if isinstance(value, Mapping):
        return _expand_axis("seeds", value, is_int=True)
    if (
        not isinstance(value, list)
        or not value
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in value)
        or len(set(value)) != len(value)
    ):
        raise _err("seeds", f"must be a count >= 1 or a non-empty list of distinct integers >= 0, got {value!r}")
    return list(value)


@dataclasses.dataclass(frozen=True)
class SweepSpec(FrozenResult):
    """A parsed, validated sweep specification (see the module docstring for the file format).

    Attributes
    ----------
    command : str
        The command each point runs.
    name : str
        The sweep's name (the manifest's file name in the store).
    fixed : dict
        Parameter -> value, the same for every point.
    axes : tuple of (str, list)
        Independent axes, in the order written.
    zips : tuple of dict
        Groups of axes varied together (each a parameter -> list of equal lengths).
    seeds : tuple of int or None
        Seeds (the command's ``--seed``), or None when the spec gives none.
    quick : bool
        Whether the ``[quick]`` overrides were applied.
    source : dict
        The specification as read (before ``quick``), for the manifest.
    """

    command: str
    name: str
    fixed: dict
    axes: tuple
    zips: tuple
    seeds: tuple | None
    quick: bool
    source: dict

    @property
    def axis_names(self) -> list[str]:
        """The names of everything that varies: axes, zipped axes, then ``seed``."""
        names = [n for n, _ in self.axes] + [n for z in self.zips for n in z]
        return names + (["seed"] if self.seeds is not None else [])

    @property
    def n_points(self) -> int:
        """Number of points of the grid."""
        size = math.prod(len(v) for _, v in self.axes) * math.prod(len(next(iter(z.values()))) for z in self.zips)
        return size * (len(self.seeds) if self.seeds is not None else 1)

    def points(self) -> list[dict]:
        """Every point's parameters (fixed, then axes; the last axis varies fastest; seeds innermost).

        Returns
        -------
        list of dict
            One parameter -> value mapping per point.
        """
        return list(self.iter_points())

    def iter_points(self):
        """Every point's parameters, one at a time, in the order of :meth:`points` (no list of the grid).

        Yields
        ------
        dict
            One parameter -> value mapping per point.
        """
        factors = [[{n: v} for v in vals] for n, vals in self.axes]
        for z in self.zips:
            length = len(next(iter(z.values())))
            factors.append([{n: vals[i] for n, vals in z.items()} for i in range(length)])
        if self.seeds is not None:
            factors.append([{"seed": s} for s in self.seeds])
        for combo in itertools.product(*factors):
            p = dict(self.fixed)
            for part in combo:
                p.update(part)
            yield p


def _int_params(command: str) -> set:
    from reduced_dynamics.sweep.commands import _actions

    return {d for d, a in _actions(command).items() if a.type is int}


def load_spec(spec, *, quick: bool = False, name=None) -> SweepSpec:
    """Read and validate a sweep specification (structure only; :func:`~reduced_dynamics.sweep.runner.plan_sweep` validates every point's values).

    Parameters
    ----------
    spec : str, Path or mapping
        A TOML file, or the same content as a dict.
    quick : bool
        Apply the ``[quick]`` overrides.
    name : str, optional
        The sweep's name (default: the spec's ``name``, else the file's stem, else ``"sweep"``).

    Returns
    -------
    SweepSpec

    Raises
    ------
    ValueError
        Naming the key: a file that is not TOML, an unknown key, an unknown
        command or parameter, an empty axis, a parameter given twice, ``seeds`` for a
        command without ``--seed``.
    """
    import tomllib

    from reduced_dynamics._validation import check_bool, check_path
    from reduced_dynamics.sweep.commands import parameters, sweep_command

    quick = check_bool("quick", quick)
    stem = None
    if isinstance(spec, (str, os.PathLike)):
        path = check_path("spec", spec)
        if not path.is_file():
            raise ValueError(f"`spec` must be a TOML file, got {str(path)!r} (no such file)")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"`spec` {str(path)!r} is not valid TOML: {exc}") from None
        stem = path.stem
    elif isinstance(spec, Mapping):
        data = dict(spec)
    else:
        raise ValueError(f"`spec` must be a TOML file or a mapping, got {type(spec).__name__}")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise _err(unknown[0], f"is not a key of a sweep spec (keys: {sorted(_TOP_KEYS)})")
    if "command" not in data:
        raise ValueError("`spec` has no `command` key: name the command each point runs")
    command = sweep_command(data["command"]).name
    source = dict(data)
    if "quick" in data:
        if not isinstance(data["quick"], Mapping):
            raise _err("[quick]", f"must be a table, got {data['quick']!r}")
        bad = sorted(set(data["quick"]) - _QUICK_KEYS)
        if bad:
            raise _err(f"quick.{bad[0]}", f"is not a key of [quick] (keys: {sorted(_QUICK_KEYS)})")
    if quick:
        q = data.get("quick")
        if q is None:
            raise _err("quick", "table is missing from the spec: it has no --quick size")
        if not isinstance(q, Mapping):
            raise _err("[quick]", f"must be a table, got {q!r}")
        bad = sorted(set(q) - _QUICK_KEYS)
        if bad:
            raise _err(f"quick.{bad[0]}", f"is not a key of [quick] (keys: {sorted(_QUICK_KEYS)})")
        data = {**data, **q}
        norm0 = lambda k: str(k).replace("-", "_")  # noqa: E731
        for key in ("fixed", "axes"):
            if not isinstance(q.get(key, {}), Mapping):
                raise _err(f"quick.{key}", f"must be a table, got {q[key]!r}")
        # quick values replace the spec's of the same parameter (t-end and t_end are one parameter)
        base_fixed = {norm0(k): v for k, v in dict(source.get("fixed", {})).items()}
        base_axes = {norm0(k): v for k, v in dict(source.get("axes", {})).items()}
        q_fixed = {norm0(k): v for k, v in dict(q.get("fixed", {})).items()}
        q_axes = {norm0(k): v for k, v in dict(q.get("axes", {})).items()}
        # [quick] wins: a quick axis replaces a fixed value of the same name, a quick fixed value an axis
        fixed_q = {k: v for k, v in base_fixed.items() if norm0(k) not in {norm0(x) for x in q_axes}}
        axes_q = {k: v for k, v in base_axes.items() if norm0(k) not in {norm0(x) for x in q_fixed}}
        data["fixed"] = {**fixed_q, **q_fixed}
        data["axes"] = {**axes_q, **q_axes}
    allowed = parameters(command)
    norm = lambda k: str(k).replace("-", "_")  # noqa: E731
    seen: dict[str, str] = {}

    def claim(key, where):
        n = norm(key)
        if n not in allowed:
            raise _err(
                f"{where}.{key}",
                f"is not a parameter of `{command}` that a sweep sets; its parameters are {sorted(allowed)}",
            )
        if n in seen:
            raise _err(f"{where}.{key}", f"is set twice (also in [{seen[n]}])")
        seen[n] = where
        return n

    fixed = data.get("fixed", {})
    if not isinstance(fixed, Mapping):
        raise _err("fixed", f"must be a table, got {fixed!r}")
    axes_in = data.get("axes", {})
    if not isinstance(axes_in, Mapping):
        raise _err("axes", f"must be a table, got {axes_in!r}")
    zips_in = data.get("zip", [])
    if isinstance(zips_in, Mapping):
        zips_in = [zips_in]
    if not isinstance(zips_in, list) or not all(isinstance(z, Mapping) for z in zips_in):
        raise _err("zip", f"must be a table or a list of tables ([[zip]]), got {zips_in!r}")
    ints = _int_params(command)
    axes = []
    for key, value in axes_in.items():
        n = claim(key, "axes")
        axes.append((n, _expand_axis(str(key), value, is_int=n in ints)))
    fixed_out = {claim(key, "fixed"): value for key, value in fixed.items()}
    zips = []
    for i, z in enumerate(zips_in):
        if not z:
            raise _err(f"zip[{i}]", "is empty")
        group = {}
        for key, value in z.items():
            n = claim(key, f"zip[{i}]")
            if not isinstance(value, list) or not value:
                raise _err(f"zip[{i}].{key}", f"must be a non-empty list, got {value!r}")
            group[n] = list(value)
        lengths = {len(v) for v in group.values()}
        if len(lengths) != 1:
            raise _err(
                f"zip[{i}]", f"must hold lists of one length, got lengths { {k: len(v) for k, v in group.items()} }"
            )
        zips.append(group)
    seeds = None
    if "seeds" in data:
        if "seed" not in allowed:
            raise _err("seeds", f"is given but `{command}` has no --seed")
        if "seed" in seen:
            raise _err("seeds", f"and `seed` in [{seen['seed']}] both set the seed: give one")
        seeds = tuple(_seeds(data["seeds"]))
    nm = name if name is not None else data.get("name", stem or "sweep")
    from reduced_dynamics.sweep.store import safe_name

    if not safe_name(nm):
        raise _err(
            "name",
            f"must be a file-name-safe string: 1 to 200 characters, no '/', '\\', control characters (newline, "
            f"tab, ...), leading '.' or surrounding spaces, got {nm!r}",
        )
    out = SweepSpec(command, nm, fixed_out, tuple(axes), tuple(zips), seeds, bool(quick), source)
    if out.n_points > MAX_POINTS:
        raise _err("axes", f"make {out.n_points} points, more than {MAX_POINTS}")
    if not quick and "quick" in source:  # a broken [quick] is refused now, not when --quick is first used
        try:
            load_spec(source, quick=True, name=nm)
        except ValueError as exc:
            raise ValueError(f"`[quick]` makes a bad spec: {exc}") from None
    return out
