"""Compare a finished drift_law sweep with the drift law γ(t) = (16 c d³ (pn/H) t)^(-1/6) (docs/theory.md#drift-law).

reduced-dynamics sweep examples/sweeps/drift_law.toml --out sweeps/drift
python examples/sweeps/drift_law_ratio.py sweeps/drift drift_law_ratio.png
"""

import sys

import matplotlib

matplotlib.use("Agg")

from reduced_dynamics import Setting, drift_law_gamma
from reduced_dynamics.sweep import load_table, plot_sweep

folder, png = sys.argv[1], sys.argv[2]
df = load_table(folder)
law = [
    drift_law_gamma(r.t, Setting(d=r.d, L=r.L, sigma2=r.sigma2), n_positive=r.n_positive, n_negative=r.n_negative)
    for r in df.itertuples()
]
df["rel_dev"] = df["gamma"] / law - 1
print(f"{len(df)} points at t = {df.t.max():g}: γ / law − 1 in [{df.rel_dev.min():.2e}, {df.rel_dev.max():.2e}]")
print(df.groupby(["d", "sigma2"])["rel_dev"].agg(["mean", "min", "max"]).to_string())
sigma2 = sorted(df.sigma2.unique())[len(df.sigma2.unique()) // 2]
ax = plot_sweep(df[df.sigma2 == sigma2], metric="rel_dev", x="L", by="d", ylabel=f"γ / drift law − 1 (σ² = {sigma2:g})")
ax.figure.savefig(png, dpi=100)
print(f"wrote {png}")
