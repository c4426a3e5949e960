"""Plot a finished trained_risk_vs_L sweep: trained risk vs L, one line per H, mean ± SE over the seeds.

reduced-dynamics sweep examples/sweeps/trained_risk_vs_L.toml --quick --out sweeps/trl
python examples/sweeps/plot_trained_risk_vs_L.py sweeps/trl risk_vs_L.png
"""

import sys

import matplotlib

matplotlib.use("Agg")

from reduced_dynamics.sweep import load_table, plot_sweep

folder, png = sys.argv[1], sys.argv[2]
df = load_table(folder)  # a pandas DataFrame, one row per finished point
print(df.groupby(["heads", "L"])["risk"].agg(["mean", "sem", "count"]).to_string())
ax = plot_sweep(df, metric="risk", x="L", by="heads", ylabel="trained risk (Monte Carlo on n_eval prompts)")
ax.figure.savefig(png, dpi=100)
print(f"wrote {png}")
