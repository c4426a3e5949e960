r"""Many gradient flows at once: a Radau IIA integrator vectorised over trajectories.

:func:`radau_batch` integrates :math:`\dot\theta = -\nabla\mathcal L(\theta)` of any reduced model with a
Hessian from B initial states in one loop whose every operation acts on all unfinished trajectories together.
The arrays are laid out **transposed**, state components first and trajectories last (``(n, N)``,
``(n, n, N)``), so that every per-component operation runs over a contiguous row of the batch. Each
trajectory keeps its own step size, error estimate, Newton convergence, Jacobian, iteration matrices,
evaluation counts and termination status; one pass of the loop makes one attempt of one step for every
unfinished trajectory, and a trajectory that stops (``t_end`` reached, an event, a failure) leaves the
working set, which is compacted so the remaining trajectories run on alone.

The method is the 3-stage Radau IIA collocation method of order 5 with the step control of
:class:`scipy.integrate.Radau` (Hairer & Wanner, *Solving ODEs II*, Sec. IV.8), per trajectory:

* simplified Newton iterations on the collocation system, transformed with the eigen-decomposition of
  the Radau matrix into one real and one complex ``n × n`` system, each solved for the whole working set
  at once with the inverses of the iteration matrices ``μ/h I − J`` (``J = −∇²L``, the model's analytic
  Hessian; inverted with one batched :func:`numpy.linalg.inv` call for the trajectories whose ``h`` or
  ``J`` changed);
* scipy's Jacobian reuse: ``J`` is recomputed only for a trajectory whose Newton iteration converged
  slowly (more than 2 iterations at a rate above 1e-3) or failed with an outdated ``J``; a failure with a
  current ``J`` halves the step; ``h`` is kept (and the iteration matrices with it) when the controller
  would grow it by less than 1.2;
* the embedded third-order error estimate, the two-step (Gustafsson) step-size controller with scipy's
  safety factors, and the cubic collocation polynomial as dense output at the common output times.

Events, per trajectory, as in the single-trajectory paths: the model's domain margin reaching 0
(status 2) and stationarity (``|∇L| < stationarity_tol``, status 1) are located on the dense output
(Illinois' regula falsi, bracketed) and end that trajectory only. A trajectory whose step size collapses
(status -1) or that exceeds the evaluation budget (status -2) ends with its own message; the others run on.

References
----------
docs/theory.md#gradient-flow
"""

from __future__ import annotations

import math
import time

import numpy as np

from reduced_dynamics.flow._status import Status, status_message

__all__ = ["radau_batch", "N_TRAJ_MAX", "BATCH_MIN"]

#: Largest number of trajectories of one batch (memory: B × n_times × n floats of output).
N_TRAJ_MAX = 100_000
#: Smallest batch that ``method="auto"`` integrates with the batched Radau (below: a loop of the LSODA path).
BATCH_MIN = 48

# --- Radau IIA (order 5) constants, as in scipy.integrate._ivp.radau ---------------------------------
_S6 = 6**0.5
_C = np.array([(4 - _S6) / 10, (4 + _S6) / 10, 1.0])
_E = np.array([-13 - 7 * _S6, -13 + 7 * _S6, -1.0]) / 3
_MU_REAL = 3 + 3 ** (2 / 3) - 3 ** (1 / 3)
_MU_COMPLEX = 3 + 0.5 * (3 ** (1 / 3) - 3 ** (2 / 3)) - 0.5j * (3 ** (5 / 6) + 3 ** (7 / 6))
_T = np.array(
    [
        [0.09443876248897524, -0.14125529502095421, 0.03002919410514742],
        [0.25021312296533332, 0.20412935229379994, -0.38294211275726192],
        [1.0, 1.0, 0.0],
    ]
)
_TI = np.array(
    [
        [4.17871859155190428, 0.32768282076106237, 0.52337644549944951],
        [-4.17871859155190428, -0.32768282076106237, 0.47662355450055044],
        [0.50287263494578682, -2.57192694985560522, 0.59603920482822492],
    ]
)
_P = np.array(
    [
        [13 / 3 + 7 * _S6 / 3, -23 / 3 - 22 * _S6 / 3, 10 / 3 + 5 * _S6],
        [13 / 3 - 7 * _S6 / 3, -23 / 3 + 22 * _S6 / 3, 10 / 3 - 5 * _S6],
        [1 / 3, -8 / 3, 10 / 3],
    ]
)
_PT = np.ascontiguousarray(_P.T)
_NEWTON_MAXITER = 6
#: scipy's Jacobian reuse: J is recomputed after an accepted step whose Newton iteration took more than _RC_ITER
#: iterations at a rate above _RC_RATE; h is kept (and the iteration matrices with it) when the controller would grow
#: it by less than _KEEP_H (on the paper's batch of 256 starts, rules from "always recompute" to rate > 1e-2, or
#: 1.5 / 2 for _KEEP_H, all cost within 3% of these)
_RC_ITER, _RC_RATE, _KEEP_H = 2, 1e-3, 1.2
_MIN_FACTOR, _MAX_FACTOR = 0.2, 10.0
#: A trajectory whose gradient is below _NEAR_STATIONARY x stationarity_tol solves its stage equations to
#: _NEAR_NEWTON x the usual Newton tolerance (scipy's max(10 eps / rtol, min(0.03, sqrt(rtol))), in units of
#: atol + rtol |y|). Approaching a stationary point the steps grow until each one is in effect a Newton step on
#: ∇L = 0, and the state is then as stationary as the stage values are solved: at rtol 1e-6 the usual tolerance
#: leaves |∇L| near 1e-9 |y|, above the default stationarity_tol 1e-10 (one of 64 trajectories of the paper's
#: setting to t = 1e3 lost its stationary status); 1e-2 of it gives ~1e-11 |y|. Elsewhere the tolerance is scipy's.
_NEAR_STATIONARY, _NEAR_NEWTON = 1e3, 1e-2
_EPS = np.finfo(float).eps


def _dense(y_old, Q, x):
    """Collocation polynomial ``y_old + Σ_j Q[:, j] x^(j+1)``; y_old (n, M), Q (n, 3, M), x (M,) -> (n, M)."""
    return y_old + x * (Q[:, 0] + x * (Q[:, 1] + x * Q[:, 2]))


def _locate(fun, y_old, Q, ftol=None, n_iter=60):
    """A root x in (0, 1] of ``fun`` along the dense output, bracketed by ``fun(0) > 0 >= fun(1)``.

    Illinois' regula falsi on the bracket, vectorised over the M columns, until ``|fun(x)| <= ftol``
    (default: 1e-13 of its larger value at the ends) or the bracket is narrower than 1e-12; returns x
    (shape (M,)): that point, or the end of the final bracket where ``fun <= 0``.
    """
    M = y_old.shape[1]
    lo, hi = np.zeros(M), np.ones(M)
    flo = fun(y_old)
    fhi = fun(_dense(y_old, Q, hi))
    tol = 1e-13 * np.maximum(np.abs(flo), np.abs(fhi)) if ftol is None else ftol
    out = hi.copy()
    done = ~(fhi <= 0) | ~(flo > 0)  # the bracket broke by rounding: keep the end of the step
    side = np.zeros(M, dtype=np.int8)
    for _ in range(n_iter):
        if done.all():
            break
        x = (lo * fhi - hi * flo) / (fhi - flo)
        x = np.where(np.isfinite(x) & (x > lo) & (x < hi), x, 0.5 * (lo + hi))
        fx = fun(_dense(y_old, Q, x))
        below = ~(fx > 0)
        act = ~done
        # Illinois: the end kept a second time in a row has its value halved
        flo = np.where(act & below & (side == -1), 0.5 * flo, flo)
        fhi = np.where(act & ~below & (side == 1), 0.5 * fhi, fhi)
        hi = np.where(act & below, x, hi)
        fhi = np.where(act & below, fx, fhi)
        lo = np.where(act & ~below, x, lo)
        flo = np.where(act & ~below, fx, flo)
        side = np.where(below, -1, 1).astype(np.int8)
        hit = act & (np.abs(fx) <= tol)
        out = np.where(hit, x, np.where(act, hi, out))
        done |= hit | (hi - lo <= 1e-12)
    return out


def _gauss_jordan(A):
    """Inverses of the real matrices ``A[:, :, m]`` (shape (n, n, M)) by Gauss–Jordan elimination in place
    (without pivoting, on one ``n × n`` array per matrix), vectorised over M (for the symmetric iteration
    matrices; :func:`_inverses` checks the result)."""
    n = A.shape[0]
    X = A.copy()
    buf = np.empty_like(X)
    for k in range(n):
        p = 1.0 / X[k, k]
        row = X[k] * p  # row k of the pivot step: a_kj / a_kk
        col = X[:, k].copy()
        col[k] = 0.0
        np.multiply(col[:, None, :], row, out=buf)
        X -= buf  # a_ij - a_ik a_kj / a_kk off row k (column k becomes 0 there: row[k] = 1)
        np.multiply(col, -p, out=X[:, k])
        row[k] = p
        X[k] = row
    return X


def _matmul(A, B):
    """``A[:, :, m] @ B[:, :, m]`` for every m (shapes (n, n, M))."""
    return np.einsum("ijm,jkm->ikm", A, B)


#: largest residual ``|A X − I|`` of an inverse X of :func:`_gauss_jordan` kept (else LAPACK's, pivoted)
_GJ_RESIDUAL = 1e-6
#: from this many matrices on, :func:`_inverses` eliminates vectorised over the batch (below: LAPACK per matrix)
_GJ_MIN = 48


def _lapack_inverses(A, h):
    """``(inv_real, inv_complex, bad)`` of ``μ/h I + A`` by batched LAPACK (pivoted), A of shape (n, n, M)."""
    n, _, M = A.shape
    At = np.moveaxis(A, 2, 0)
    i = np.arange(n)
    bad = np.zeros(M, dtype=bool)
    out = []
    for mu in (_MU_REAL, _MU_COMPLEX):
        X = At.astype(np.complex128 if isinstance(mu, complex) else np.float64)
        X[:, i, i] += (mu / h)[:, None]
        try:
            inv = np.linalg.inv(X)
        except np.linalg.LinAlgError:
            inv = np.empty_like(X)
            for k in range(M):
                try:
                    inv[k] = np.linalg.inv(X[k])
                except np.linalg.LinAlgError:
                    inv[k] = np.eye(n)
                    bad[k] = True
        out.append(np.ascontiguousarray(np.moveaxis(inv, 0, 2)))
    return out[0], out[1], bad


def _inverses(J, h):
    """Inverses of the iteration matrices ``μ_real/h I − J`` and ``μ_complex/h I − J``, J of shape (n, n, M).

    Returns ``(inv_real (n, n, M), (P2, PM2), bad (M,))`` with the complex inverse as the real operators of
    :func:`_complex_blocks`; ``bad`` marks a non-finite or
    singular matrix (its inverse is then the identity, and its Newton iteration counts as failed).

    For many matrices, vectorised over the batch: the real one by Gauss–Jordan elimination, the complex
    one through the real identity ``(C + ibI)⁻¹ = (C − ibI)(C² + b²I)⁻¹`` (``C = a/h I − J``,
    ``μ_complex = a + ib``), whose ``C² + b²I`` is symmetric positive definite for the symmetric J of a
    gradient flow (elimination without pivoting is stable there); an inverse whose residual exceeds
    1e-6 is recomputed by LAPACK with pivoting.
    """
    n, _, M = J.shape
    A = -J
    bad = ~np.isfinite(np.add.reduce(A.reshape(n * n, M), axis=0))
    if bad.any():
        A[:, :, bad] = 0.0
    if M < _GJ_MIN:
        inv_r, inv_c, bad2 = _lapack_inverses(A, h)
        return inv_r, _complex_blocks(inv_c.real, inv_c.imag, h), bad | bad2
    i = np.arange(n)
    # one elimination for both: [μ_real/h I + A, C² + b²I] side by side on the batch axis
    C = A.copy()
    C[i, i] += _MU_COMPLEX.real / h
    b = _MU_COMPLEX.imag / h
    S = np.empty((n, n, 2 * M))
    S[:, :, :M] = A
    S[i, i, :M] += _MU_REAL / h
    S[:, :, M:] = _matmul(C, C)
    S[i, i, M:] += b * b
    X = _gauss_jordan(S)
    inv_r = np.ascontiguousarray(X[:, :, :M])
    Dinv = X[:, :, M:]
    # the real matrix may be indefinite: its inverse is checked by its residual; C² + b²I is symmetric positive
    # definite, where elimination without pivoting is backward stable: its inverse is checked to be finite
    R = _matmul(S[:, :, :M], inv_r)
    R[i, i] -= 1.0
    res = np.maximum.reduce(np.abs(R).reshape(n * n, M), axis=0)
    Pr = _matmul(C, Dinv)  # (C + ibI)⁻¹ = C D⁻¹ − ib D⁻¹ (C and D commute)
    Pi = Dinv * -b
    redo = ~((res <= _GJ_RESIDUAL) & np.isfinite(np.add.reduce(Dinv.reshape(n * n, M), axis=0)))
    if redo.any():
        r = np.flatnonzero(redo)
        inv_r[:, :, r], inv_c, bad2 = _lapack_inverses(A[:, :, r], h[r])
        Pr[:, :, r], Pi[:, :, r] = inv_c.real, inv_c.imag
        bad[r] |= bad2
    return inv_r, _complex_blocks(Pr, Pi, h), bad


def _complex_blocks(Pr, Pi, h):
    """The complex inverse ``P = Pr + i Pi`` (each of shape (n, n, M)) as real operators on (real, imaginary)
    pairs: ``(P2, PM2)``, each of shape (n, 2, n, 2, M), with ``P2 @ v`` = ``P v`` and ``PM2 @ v`` =
    ``P (μ_complex/h) v`` for v = (Re, Im) (real arithmetic on the Newton iteration: half the cost of numpy's
    complex one)."""
    n, _, M = Pr.shape
    a = _MU_COMPLEX.real / h
    b = _MU_COMPLEX.imag / h
    P2 = np.empty((n, 2, n, 2, M))
    PM2 = np.empty_like(P2)
    for out, re, im in ((P2, Pr, Pi), (PM2, a * Pr - b * Pi, a * Pi + b * Pr)):  # PM2: P·(a + ib)
        out[:, 0, :, 0] = re
        out[:, 1, :, 1] = re
        np.negative(im, out=out[:, 0, :, 1])
        out[:, 1, :, 0] = im
    return P2, PM2


def _rms(x):
    """Root mean square over all axes but the last (the trajectories)."""
    m = x.shape[-1]
    x = x.reshape(-1, m)
    return np.sqrt(np.einsum("ij,ij->j", x, x) / x.shape[0])


class _Active:
    """The per-trajectory solver state of the unfinished trajectories (trajectories on the last axis)."""

    NAMES = (
        "ids t y f h h_start h_old err_old J inv_r P2 PM2 lu_h lu_bad need_jac jac_current rejected "
        "Q t_prev h_prev y_prev nxt nfev njev nlu nsteps"
    ).split()

    def keep(self, mask):
        for k in self.NAMES:
            setattr(self, k, getattr(self, k)[..., mask])


def _located_events(K, pending, t_out, Y_out, status, t_stop, y_stop, log_tol):
    """Locate the events of the steps in ``pending`` on their dense output, all at once, and end the trajectories
    there: outputs before the event, the stop time and state, the status (the earlier event of a step that met
    both: the margin, status 2, or stationarity, status 1)."""
    ids, y, Q, t, h, hit_m, hit_s, nxt = (np.concatenate(p, axis=-1) for p in zip(*pending))
    M = ids.size
    ev_t = np.full(M, np.inf)
    kind = np.zeros(M, dtype=np.int64)
    if hit_m.any():
        m = np.flatnonzero(hit_m)
        xs = _locate(K.margin, y[:, m], Q[:, :, m])
        ev_t[m] = t[m] + xs * h[m]
        kind[m] = int(Status.LEFT_DOMAIN)
    if hit_s.any():
        m = np.flatnonzero(hit_s)
        # log|∇L| is noisy at ~1e-6 near a stationary point (|∇L| ~ 1e-10 from terms of size 1): located where
        # |∇L| is stationarity_tol to 1e-5 (a tighter target only bisects the noise)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            xs = _locate(lambda yy: np.log(K.grad_norm(yy) + 1e-300) - log_tol, y[:, m], Q[:, :, m], ftol=1e-5)
        ts = t[m] + xs * h[m]
        earlier = ts < ev_t[m]
        ev_t[m[earlier]] = ts[earlier]
        kind[m[earlier]] = int(Status.STATIONARY)
    cnt = np.maximum(np.searchsorted(t_out, ev_t, side="left") - nxt, 0)
    if cnt.any():
        rows = np.repeat(np.arange(M), cnt)
        kk = np.arange(rows.size) - np.repeat(np.cumsum(cnt) - cnt, cnt) + nxt[rows]
        Y_out[ids[rows], kk] = _dense(y[:, rows], Q[:, :, rows], (t_out[kk] - t[rows]) / h[rows]).T
    status[ids] = kind
    t_stop[ids] = ev_t
    y_stop[ids] = _dense(y, Q, (ev_t - t) / h).T


def radau_batch(model, y0, t_out, *, rtol, atol, stationarity_tol, budget):
    """Integrate the flows of ``model`` from the rows of ``y0`` (shape (B, n)), output at ``t_out`` (shape (T,)).

    Returns a dict of arrays: ``status (B,), message (B,), Y_out (B, T, n; NaN after a stop), t_stop (B,),
    y_stop (B, n), nfev, njev, nlu, n_steps (B,), seconds``.
    """
    K = model.batch_kernels()
    t_end = float(t_out[-1])
    B, n = y0.shape
    T = t_out.size
    Y_out = np.full((B, T, n), np.nan)
    first_out = 0
    if t_out[0] == 0:
        Y_out[:, 0] = y0
        first_out = 1
    status = np.zeros(B, dtype=np.int64)
    notes = {}
    t_stop = np.full(B, t_end)
    y_stop = y0.copy()
    nfev = np.zeros(B, dtype=np.int64)
    njev = np.zeros(B, dtype=np.int64)
    nlu = np.zeros(B, dtype=np.int64)
    nsteps = np.zeros(B, dtype=np.int64)
    stat2 = stationarity_tol * stationarity_tol
    log_tol = math.log(stationarity_tol) if stationarity_tol > 0 else 0.0
    newton_tol = max(10 * _EPS / rtol, min(0.03, rtol**0.5))
    newton_tol_near = max(10 * _EPS / rtol, _NEAR_NEWTON * newton_tol)
    near2 = stat2 * _NEAR_STATIONARY**2
    end_gap = 10 * float(np.spacing(t_end))  # a step ending closer to t_end ends at t_end
    pending = []  # the steps in which a trajectory met an event (located after the loop)
    start = time.perf_counter()

    def finish(s, mask):
        """Copy the counters of the finished trajectories ``mask`` out and drop them from the working set."""
        b = s.ids[mask]
        nfev[b], njev[b], nlu[b], nsteps[b] = s.nfev[mask], s.njev[mask], s.nlu[mask], s.nsteps[mask]
        s.keep(~mask)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        s = _Active()
        yT = np.ascontiguousarray(y0.T)
        f0 = K.rhs(yT)
        # initial step: scipy's select_initial_step (error-estimator order 3), per trajectory
        scale0 = atol + np.abs(yT) * rtol
        d0 = _rms(yT / scale0)
        d1 = _rms(f0 / scale0)
        h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / np.where(d1 > 0, d1, 1.0))
        h0 = np.minimum(h0, t_end)
        f1 = K.rhs(yT + h0 * f0)
        d2 = _rms((f1 - f0) / scale0) / h0
        big = np.maximum(d1, d2)
        h1 = np.where(big <= 1e-15, np.maximum(1e-6, h0 * 1e-3), (0.01 / np.where(big > 0, big, 1.0)) ** 0.25)
        s.ids = np.arange(B)
        s.t = np.zeros(B)
        s.y = yT
        s.f = f0
        s.h = np.minimum(np.minimum(100 * h0, h1), t_end)
        s.h_start = s.h.copy()  # the step size proposed at the start of the current step (scipy's h_abs)
        s.h_old = np.full(B, np.nan)
        s.err_old = np.full(B, np.nan)
        s.J = K.jac(yT)
        s.inv_r = np.zeros((n, n, B))
        s.P2 = np.zeros((n, 2, n, 2, B))
        s.PM2 = np.zeros((n, 2, n, 2, B))
        s.lu_h = np.full(B, np.nan)  # the step size of the stored inverses (NaN: none)
        s.lu_bad = np.zeros(B, dtype=bool)
        s.need_jac = np.zeros(B, dtype=bool)
        s.jac_current = np.ones(B, dtype=bool)
        s.rejected = np.zeros(B, dtype=bool)
        # the dense output of the last accepted step (none yet: Q = 0, y_prev = y gives Z0 = 0)
        s.Q = np.zeros((n, 3, B))
        s.t_prev = np.zeros(B)
        s.h_prev = np.ones(B)
        s.y_prev = yT.copy()
        s.nxt = np.full(B, first_out, dtype=np.int64)
        s.nfev = np.full(B, 2, dtype=np.int64)
        s.njev = np.ones(B, dtype=np.int64)
        s.nlu = np.zeros(B, dtype=np.int64)
        s.nsteps = np.zeros(B, dtype=np.int64)
        if stationarity_tol > 0:
            stat0 = np.sum(f0 * f0, axis=0) < stat2
            if stat0.any():
                status[stat0] = int(Status.STATIONARY)
                t_stop[stat0] = 0.0
                finish(s, stat0)

        while s.ids.size:
            N = s.ids.size
            t, y = s.t, s.y
            ha = np.minimum(s.h, t_end - t)
            tiny = ha < 10 * np.spacing(t)
            over = s.nfev > budget
            if (tiny | over).any():
                for k in np.flatnonzero(tiny | over):
                    b = s.ids[k]
                    st = Status.SOLVER_FAILED if tiny[k] else Status.BUDGET_EXHAUSTED
                    status[b] = int(st)
                    tail = "The step size collapsed at" if tiny[k] else "Stopped at"
                    notes[b] = f"{status_message(st, model, budget=budget)} {tail} t = {t[k]:.4g}."
                    t_stop[b], y_stop[b] = t[k], y[:, k]
                finish(s, tiny | over)
                continue
            # Jacobians where asked for (a slow or failed Newton iteration), then the iteration matrices of the
            # trajectories whose h or J changed
            if s.need_jac.any():
                jj = np.flatnonzero(s.need_jac)
                if jj.size == N:
                    s.J = K.jac(y)
                elif 4 * jj.size >= N:  # all at once and merged (a gather and a scatter cost more)
                    s.J = np.where(s.need_jac, K.jac(y), s.J)
                else:
                    s.J[:, :, jj] = K.jac(y[:, jj])
                s.njev += s.need_jac
                s.jac_current[jj] = True
                s.need_jac[jj] = False
                s.lu_h[jj] = np.nan
            stale = ~(ha == s.lu_h)
            if stale.any():
                ll = np.flatnonzero(stale)
                if 2 * ll.size >= N:  # all (the others' inverses come out the same: same J, same h)
                    s.inv_r, (s.P2, s.PM2), s.lu_bad = _inverses(s.J, ha)
                else:
                    s.inv_r[:, :, ll], (s.P2[..., ll], s.PM2[..., ll]), s.lu_bad[ll] = _inverses(s.J[:, :, ll], ha[ll])
                s.lu_h[ll] = ha[ll]
                s.nlu += stale
            inv_r, P2, PM2 = s.inv_r, s.P2, s.PM2
            # Newton (simplified) on the collocation system, started from the previous collocation polynomial
            x = (t + ha * _C[:, None] - s.t_prev) / s.h_prev  # (3 stages, N)
            x2 = x * x
            Q = s.Q
            Z = np.einsum("cjm,jsm->csm", Q, np.stack((x, x2, x2 * x))) + (s.y_prev - y)[:, None, :]  # (n, 3, N)
            W = np.matmul(_TI, Z)
            # 1/scale, with the 1/sqrt(3n) of the root mean square over the 3n entries folded in
            inv_scale = (1.0 / ((atol + np.abs(y) * rtol) * math.sqrt(3 * n)))[:, None, :]
            Mr = _MU_REAL / ha
            live = ~s.lu_bad
            if stat2 > 0:  # near a stationary point the stage values are solved more tightly (see _NEAR_STATIONARY)
                ntol = np.where(np.add.reduce(s.f * s.f, axis=0) < near2, newton_tol_near, newton_tol)
            else:
                ntol = newton_tol
            conv = np.zeros(N, dtype=bool)
            n_iter = np.zeros(N, dtype=np.int64)
            rate = np.full(N, np.nan)
            dW = np.empty((n, 3, N))
            dW_old = None
            y3 = y[:, None, :]
            for k in range(_NEWTON_MAXITER):
                F = K.rhs((y3 + Z).reshape(n, 3 * N)).reshape(n, 3, N)
                n_iter += live  # the iterations (3 evaluations each) of every trajectory still iterating
                G = np.matmul(_TI, F)  # row 0: TI_REAL·F; rows 1, 2: the real and imaginary parts of TI_COMPLEX·F
                dW[:, 0] = np.einsum("ijm,jm->im", inv_r, G[:, 0] - Mr * W[:, 0])
                # the complex system on (real, imaginary) pairs: P (TI_COMPLEX·F − μ_complex/h W_complex)
                dW[:, 1:] = np.einsum("isjtm,jtm->ism", P2, G[:, 1:]) - np.einsum("isjtm,jtm->ism", PM2, W[:, 1:])
                e = (dW * inv_scale).reshape(3 * n, N)
                dW_norm = np.sqrt(np.einsum("ij,ij->j", e, e))
                if k:
                    # scipy's tests; a trajectory still iterating has dW_old > 0 (0 converged) and finite. A
                    # non-finite gradient at a stage makes dW_norm and the rate NaN or inf: the iteration fails
                    rk = dW_norm / dW_old
                    rate = np.where(live, rk, rate)
                    q = dW_norm / (1 - rk)
                    live &= (rk < 1) & (rk ** (_NEWTON_MAXITER - k) * q <= ntol)
                    c_now = live & (rk * q < ntol)
                else:
                    live &= np.isfinite(dW_norm)
                    c_now = live & (dW_norm == 0)
                W = np.where(live, W + dW, W)
                Z = np.matmul(_T, W)  # unchanged where W is (the converged and the failed)
                conv |= c_now
                live &= ~c_now
                if not live.any():
                    break
                dW_old = dW_norm
            s.nfev += 3 * n_iter
            h_new = s.h
            if not conv.all():
                nc = ~conv
                retry = nc & ~s.jac_current  # an outdated J: recompute it and try the same h again
                s.need_jac |= retry
                h_new = np.where(nc & s.jac_current, 0.5 * ha, h_new)
            if not conv.any():
                s.h = h_new
                continue
            # error estimate (the converged ones)
            y_new = y + Z[:, 2]
            ZE = np.matmul(_E, Z) / ha
            err = np.einsum("ijm,jm->im", inv_r, s.f + ZE)
            inv_sc = 1.0 / (atol + np.maximum(np.abs(y), np.abs(y_new)) * rtol)
            err_norm = _rms(err * inv_sc)
            again = conv & s.rejected & (err_norm > 1)
            if again.any():
                a = np.flatnonzero(again)
                fa = K.rhs(y[:, a] + err[:, a])
                s.nfev[a] += 1
                e2 = np.einsum("ijm,jm->im", inv_r[:, :, a], fa + ZE[:, a])
                err_norm[a] = _rms(e2 * inv_sc[:, a])
            err_norm = np.where(np.isfinite(err_norm), err_norm, np.inf)
            safety = (0.9 * (2 * _NEWTON_MAXITER + 1)) / (2 * _NEWTON_MAXITER + n_iter)
            two = ~np.isnan(s.h_old) & (err_norm > 0)
            mult = np.where(two, ha / s.h_old * (s.err_old / err_norm) ** 0.25, 1.0)
            factor = np.minimum(1.0, mult) * err_norm**-0.25
            rej = conv & (err_norm > 1)
            acc = conv & ~rej
            if rej.any():
                h_new = np.where(rej, ha * np.maximum(_MIN_FACTOR, safety * factor), h_new)
                s.rejected |= rej
            if not acc.any():
                s.h = h_new
                continue
            # accepted steps
            all_acc = bool(acc.all())
            recompute = acc & (n_iter > _RC_ITER) & (rate > _RC_RATE)
            fac = np.minimum(_MAX_FACTOR, safety * factor)
            fac = np.where(recompute | (fac >= _KEEP_H), fac, 1.0)
            t_new = t + ha
            t_new = np.where(t_end - t_new < end_gap, t_end, t_new)
            if all_acc:
                f_new = K.rhs(y_new)
            else:
                ai = np.flatnonzero(acc)
                if 2 * ai.size >= N:  # all and merged (a gather and a scatter cost more)
                    f_new = np.where(acc, K.rhs(y_new), s.f)
                else:
                    f_new = s.f.copy()
                    f_new[:, ai] = K.rhs(y_new[:, ai])
            s.nfev += acc
            s.nsteps += acc
            Q_new = np.matmul(_PT, Z)
            # events at the new state: the trajectory ends in this step; the event is located on its dense output
            # after the loop, for all such trajectories at once (_located_events)
            hit_m = acc & ~(K.margin(y_new) > 0)
            hit_s = acc & (np.add.reduce(f_new * f_new, axis=0) < stat2) if stat2 > 0 else hit_m & False
            stop = hit_m | hit_s
            if stop.any():
                si = np.flatnonzero(stop)
                pending.append((s.ids[si], y[:, si], Q_new[:, :, si], t[si], ha[si], hit_m[si], hit_s[si], s.nxt[si]))
            else:
                stop = None
            # dense output at the output times in (t, t_new]
            k_hi = np.searchsorted(t_out, t_new, side="right")
            cnt = np.where(acc if stop is None else acc & ~stop, k_hi - s.nxt, 0)
            most = int(cnt.max())
            if most:
                if most == 1:  # the common case: at most one output time in each step
                    rows = np.flatnonzero(cnt)
                    kk = s.nxt[rows]
                else:
                    rows = np.repeat(np.arange(N), cnt)
                    kk = np.arange(rows.size) - np.repeat(np.cumsum(cnt) - cnt, cnt) + s.nxt[rows]
                xo = (t_out[kk] - t[rows]) / ha[rows]
                Y_out[s.ids[rows], kk] = _dense(y[:, rows], Q_new[:, :, rows], xo).T
                s.nxt += cnt
            # advance the accepted ones
            s.need_jac |= recompute
            s.jac_current &= ~(acc & ~recompute)
            s.rejected &= ~acc
            s.h_old = np.where(acc, s.h_start, s.h_old)
            s.err_old = np.where(acc, err_norm, s.err_old)
            h_new = np.where(acc, ha * fac, h_new)
            s.h = h_new
            s.h_start = np.where(acc, h_new, s.h_start)
            if all_acc:
                s.t_prev, s.h_prev, s.y_prev, s.Q = t, ha, y, Q_new
                s.t, s.y, s.f = t_new, y_new, f_new
            else:
                s.t_prev = np.where(acc, t, s.t_prev)
                s.h_prev = np.where(acc, ha, s.h_prev)
                s.y_prev = np.where(acc, y, s.y_prev)
                s.Q = np.where(acc, Q_new, Q)
                s.t = np.where(acc, t_new, t)
                s.y = np.where(acc, y_new, y)
                s.f = f_new
            ended = acc & (t_new >= t_end)
            if stop is not None:
                ended &= ~stop
            if ended.any():
                b = s.ids[ended]
                Y_out[b, T - 1] = y_new[:, ended].T  # the last output time is t_end itself
                y_stop[b] = y_new[:, ended].T
                t_stop[b] = t_end
            if stop is not None:
                ended |= stop
            if ended.any():
                finish(s, ended)
        if pending:
            _located_events(K, pending, t_out, Y_out, status, t_stop, y_stop, log_tol)
    seconds = time.perf_counter() - start
    # (not np.unique: it loads numpy.ma, ~5 ms of the command's start-up)
    msgs = {int(st): status_message(int(st), model) for st in set(status.tolist())}
    message = tuple(notes.get(b, msgs[int(status[b])]) for b in range(B))
    return {
        "status": status,
        "message": message,
        "Y_out": Y_out,
        "t_stop": t_stop,
        "y_stop": y_stop,
        "nfev": nfev,
        "njev": njev,
        "nlu": nlu,
        "n_steps": nsteps,
        "seconds": seconds,
    }
