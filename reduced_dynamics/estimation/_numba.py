"""Optional JIT kernels of the risk engine (``pip install reduced-dynamics[numba]``; internal).

``estimate_risks(..., backend="numba")`` evaluates the fused predictors
(:mod:`reduced_dynamics.estimation._fast`) with the kernels below: one compiled
loop per block that draws **the same random stream as the numpy path** (numba's
``numpy.random.Generator`` support reproduces numpy's ziggurat and Gamma
samplers draw for draw, consumed here in the numpy path's order) and then
evaluates every predictor prompt by prompt, without ``(n, L)`` temporaries. The
two backends therefore give the same numbers up to rounding
(``tests/reduced_dynamics/estimation/test_numba.py``). The numpy path stays the
default; this module is imported only when the numba backend is asked for.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_JIT = dict(cache=True)


@numba.njit(**_JIT)
def _stats_block(rng, m, L, d, sigma2, conditional, kinds, eta, h0, h1, homega, hmu, s, y, out):  # pragma: no cover
    # ---- draws, in the order of prompts._draw_stats_into
    r2 = np.empty(m)
    for i in range(m):
        r2[i] = rng.chisquare(d)
    for i in range(m):
        for j in range(L):
            s[i, j] = rng.standard_normal()
    yq = np.empty(m)
    if not conditional:
        beta1 = np.empty(m)
        for i in range(m):
            beta1[i] = rng.standard_normal() / math.sqrt(d)
        c = np.empty(m)
        for i in range(m):
            bp = rng.chisquare(d - 1) / d if d > 1 else 0.0
            c[i] = math.sqrt(bp + sigma2)
        for i in range(m):
            for j in range(L):
                y[i, j] = rng.standard_normal() * c[i] + beta1[i] * s[i, j]
        for i in range(m):
            yq[i] = beta1[i] * math.sqrt(r2[i]) + math.sqrt(sigma2) * rng.standard_normal()
    # ---- losses, prompt by prompt
    P = kinds.shape[0]
    c_perp = (d - 1) / d + sigma2
    z = np.empty(L)
    w = np.empty(L)
    for i in range(m):
        r = math.sqrt(r2[i])
        S1 = 0.0
        S2 = 0.0
        Sy = 0.0
        Y1 = 0.0
        smax = -np.inf
        smin = np.inf
        for j in range(L):
            v = s[i, j] * r
            s[i, j] = v
            S1 += v
            S2 += v * v
            if v > smax:
                smax = v
            if v < smin:
                smin = v
            if not conditional:
                Sy += v * y[i, j]
                Y1 += y[i, j]
        for p in range(P):
            k = kinds[p]
            if k == 0:  # zero
                if conditional:
                    out[i, p] = r2[i] / d + sigma2
                else:
                    out[i, p] = yq[i] * yq[i]
            elif k == 1 or k == 2:  # GD, debiased GD
                cc = eta[p] / L
                Sc = S2 if k == 1 else S2 - S1 * S1 / L
                if conditional:
                    ws = cc * Sc
                    out[i, p] = (r2[i] - ws) ** 2 / (d * r2[i]) + sigma2 + c_perp * cc * cc * Sc
                else:
                    pred = cc * (Sy if k == 1 else Sy - S1 * Y1 / L)
                    e = yq[i] - pred
                    out[i, p] = e * e
            else:  # softmax heads
                pred = 0.0
                for j in range(L):
                    w[j] = 0.0
                for h in range(h0[p], h1[p]):
                    o = homega[h]
                    shift = o * smax if o >= 0 else o * smin
                    Z = 0.0
                    for j in range(L):
                        t = math.exp(o * s[i, j] - shift)
                        z[j] = t
                        Z += t
                    f = hmu[h] / Z
                    if conditional:
                        for j in range(L):
                            w[j] += f * z[j]
                    else:
                        zy = 0.0
                        for j in range(L):
                            zy += z[j] * y[i, j]
                        pred += f * zy
                if conditional:
                    ws = 0.0
                    ww = 0.0
                    for j in range(L):
                        ws += w[j] * s[i, j]
                        ww += w[j] * w[j]
                    out[i, p] = (r2[i] - ws) ** 2 / (d * r2[i]) + sigma2 + c_perp * ww
                else:
                    e = yq[i] - pred
                    out[i, p] = e * e


@numba.njit(**_JIT)
def _gram_block(rng, m, L, d, sigma2, conditional, kinds, lams, out):  # pragma: no cover
    # ---- draws, in the order of _fast.draw_gram
    r2 = np.empty(m)
    for i in range(m):
        r2[i] = rng.chisquare(d)
    diag = np.empty((d, m))
    for a in range(d):
        for i in range(m):
            diag[a, i] = math.sqrt(2.0 * rng.standard_gamma((L - a) / 2.0))
    K = d * (d - 1) // 2
    off = np.empty((K, m))
    for a in range(K):
        for i in range(m):
            off[a, i] = rng.standard_normal()
    G = 2 * d + 1
    g = np.empty((G, m))
    if not conditional:
        for a in range(G):
            for i in range(m):
                g[a, i] = rng.standard_normal()
    # ---- losses, prompt by prompt
    P = kinds.shape[0]
    R = np.zeros((d, d))
    M = np.empty((d, d))
    C = np.zeros((d, d))
    hz = np.empty(d)
    h = np.empty(d)
    Rh = np.empty(d)
    sig = math.sqrt(sigma2)
    sqd = math.sqrt(d)
    for i in range(m):
        k = 0
        for a in range(d):
            R[a, a] = diag[a, i]
            for b in range(a + 1, d):
                R[a, b] = off[k, i]
                k += 1
        r = math.sqrt(r2[i])
        for p in range(P):
            if kinds[p] == 0:
                if conditional:
                    out[i, p] = r2[i] / d + sigma2
                else:
                    e = r * g[0, i] / sqd + g[2 * d, i] * sig
                    out[i, p] = e * e
                continue
            lam = lams[p]
            for a in range(d):
                for b in range(a + 1):
                    acc = 0.0
                    for q in range(b + 1):
                        acc += R[q, a] * R[q, b]
                    M[a, b] = acc + (lam if a == b else 0.0)
            for b in range(d):  # Cholesky M = C Cᵀ
                acc = M[b, b]
                for q in range(b):
                    acc -= C[b, q] * C[b, q]
                C[b, b] = math.sqrt(acc)
                for a in range(b + 1, d):
                    acc = M[a, b]
                    for q in range(b):
                        acc -= C[a, q] * C[b, q]
                    C[a, b] = acc / C[b, b]
            for a in range(d):  # C hz = e1
                acc = 1.0 if a == 0 else 0.0
                for q in range(a):
                    acc -= C[a, q] * hz[q]
                hz[a] = acc / C[a, a]
            for a in range(d - 1, -1, -1):  # Cᵀ h = hz
                acc = hz[a]
                for q in range(a + 1, d):
                    acc -= C[q, a] * h[q]
                h[a] = acc / C[a, a]
            for a in range(d):
                acc = 0.0
                for b in range(a, d):
                    acc += R[a, b] * h[b]
                Rh[a] = acc
            if conditional:
                hh = 0.0
                rr = 0.0
                for a in range(d):
                    hh += (lam * h[a]) ** 2
                    rr += Rh[a] * Rh[a]
                out[i, p] = r2[i] * hh / d + sigma2 * (1.0 + r2[i] * rr)
            else:
                hb = 0.0
                ru = 0.0
                for a in range(d):
                    hb += lam * h[a] * (g[a, i] / sqd)
                    ru += Rh[a] * (g[d + a, i] * sig)
                e = r * (hb - ru) + g[2 * d, i] * sig
                out[i, p] = e * e


_KIND = {"zero": 0, "gd": 1, "dgd": 2, "heads": 3}


def stats_block(rng, m, specs, *, d, L, sigma2, conditional, s, y, out) -> None:
    """Draw one statistics block of ``m`` prompts from ``rng`` (numpy path's stream) and fill ``out`` (m, P)."""
    P = len(specs)
    kinds = np.array([_KIND[sp[0]] for sp in specs], dtype=np.int64)
    eta = np.array([sp[1] if sp[0] in ("gd", "dgd") else 0.0 for sp in specs])
    h0, h1, om, mu = np.zeros(P, np.int64), np.zeros(P, np.int64), [], []
    for p, sp in enumerate(specs):
        h0[p] = len(om)
        if sp[0] == "heads":
            om.extend(sp[1])
            mu.extend(sp[2])
        h1[p] = len(om)
    om = np.array(om + [0.0])
    mu = np.array(mu + [0.0])
    _stats_block(rng, m, L, d, float(sigma2), bool(conditional), kinds, eta, h0, h1, om, mu, s, y, out)


def gram_block(rng, m, specs, *, d, L, sigma2, conditional, out) -> None:
    """Draw one Gram block of ``m`` prompts from ``rng`` (numpy path's stream) and fill ``out`` (m, P)."""
    kinds = np.array([0 if sp[0] == "zero" else 1 for sp in specs], dtype=np.int64)
    lams = np.array([0.0 if sp[0] == "zero" else sp[1] for sp in specs])
    _gram_block(rng, m, L, d, float(sigma2), bool(conditional), kinds, lams, out)
