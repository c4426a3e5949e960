"""The tidy table (CSV, Parquet, pandas) and the mean ± SE plot helper, against independent computations."""

import csv
import math

import numpy as np
import pytest

from reduced_dynamics.sweep import Store, plot_sweep, run_sweep, sweep_curves, write_table
from reduced_dynamics.sweep.table import table_rows

from .conftest import tiny_spec

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sw")
    spec = tiny_spec(seeds=[0, 1, 2], axes={"heads": [2, 3], "L": [10, 20]})
    spec["fixed"] = {k: v for k, v in spec["fixed"].items() if k != "L"}
    run_sweep(spec, out=out, workers=1)
    return out


def test_table_columns_and_rows(swept):
    files = write_table(swept)
    from reduced_dynamics.sweep import load_table

    df = load_table(swept)
    assert files.n_rows == len(df) == 12 and files.n_failed == 0
    # one column per parameter (full configuration) and per scalar result; lists spread, record columns first
    assert list(df.columns[:4]) == ["key", "command", "version", "status"]
    for col in ("heads", "L", "seed", "t_end", "method", "gamma", "eta_eff", "omega.0", "stage_times.zero_sum"):
        assert col in df.columns, col
    assert "result.L" in df.columns and (df["result.L"] == df["L"]).all()  # the result's own L, renamed
    assert "omega.2" in df.columns and df.loc[df["heads"] == 2, "omega.2"].isna().all()
    # each row's numbers are its record's, exactly
    store = Store(swept)
    for _, row in df.iterrows():
        rec = store.get(row["key"])
        assert row["gamma"] == rec["result"]["gamma"] and row["seed"] == rec["config"]["seed"]
    # the CSV reads back to the same numbers (floats written with repr: exact)
    back = pd.read_csv(files.csv)
    assert np.array_equal(back["gamma"].to_numpy(), df["gamma"].to_numpy())
    assert list(back.columns) == list(df.columns)
    if files.parquet is not None:
        pq = pd.read_parquet(files.parquet)
        assert np.array_equal(pq["gamma"].to_numpy(), df["gamma"].to_numpy())


def test_rows_do_not_depend_on_record_order(swept):
    recs = Store(swept).records()
    cols_a, rows_a = table_rows(recs)
    cols_b, rows_b = table_rows(recs[::-1])
    assert cols_a == cols_b and rows_a == rows_b


def test_curves_are_mean_and_se_over_seeds(swept):
    curves = sweep_curves(swept, metric="gamma", x="L", by="heads")
    assert curves.labels == ((2,), (3,))
    # independent route: the records themselves, grouped by hand
    with open(write_table(swept).csv) as fh:
        rows = list(csv.DictReader(fh))
    for (h,), xs, mean, se, n in zip(curves.labels, curves.xs, curves.mean, curves.se, curves.n):
        assert list(xs) == [10, 20] and list(n) == [3, 3]
        for i, L in enumerate(xs):
            vals = [float(r["gamma"]) for r in rows if int(r["heads"]) == h and int(r["L"]) == L]
            m = sum(vals) / len(vals)
            s = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1) / len(vals))
            assert mean[i] == pytest.approx(m, rel=1e-12) and se[i] == pytest.approx(s, rel=1e-9)


def test_curves_refuse_to_average_over_another_axis(swept):
    with pytest.raises(ValueError, match=r"`by`.*heads"):
        sweep_curves(swept, metric="gamma", x="L")
    with pytest.raises(ValueError, match="`metric`"):
        sweep_curves(swept, metric="nope", x="L", by="heads")
    with pytest.raises(ValueError, match="`metric`"):
        sweep_curves(swept, metric="method", x="L", by="heads")


def test_plot_draws_one_line_per_curve(swept, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    ax = plot_sweep(swept, metric="gamma", x="L", by="heads")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["heads=2", "heads=3"]
    assert ax.get_xlabel() == "L" and "mean ± SE over 3 seed(s)" in ax.get_title()
    ax.figure.savefig(tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
