r"""Many gradient flows at once: a Radau IIA integrator vectorised over trajectories.

:func:`radau_batch` integrates :math:`\dot\theta = -\nabla\mathcal L(\theta)` of any reduced model with a
Hessian from B initial states in one loop whose every operation acts on all unfinished trajectories together
(arrays of shape ``(B, n)``, ``(B, n, n)``). Each trajectory keeps **its own step size**, error estimate,
evaluation counts and termination status; the loop advances every unfinished trajectory by one of its
own steps per iteration, and a trajectory that stops (``t_end`` reached, an event, a failure) leaves
the working set without disturbing the others.

The method is the 3-stage Radau IIA collocation method of order 5 (the method of
:class:`scipy.integrate.Radau`, Hairer & Wanner, *Solving ODEs II*, Sec. IV.8): simplified Newton
iterations with the model's analytic Jacobian ``−∇²L`` (evaluated for the whole batch at once, the
real and the complex ``n × n`` iteration matrices inverted by batched ``numpy.linalg.inv``), the
embedded third-order error estimate, the two-step (Gustafsson) step-size controller, and the cubic
collocation polynomial as dense output at the common output times. Step control, Newton tolerances
and safety factors are scipy's.

Events, per trajectory, as in the single-trajectory paths: the model's domain margin reaching 0
(status 2) and stationarity (``|∇L| < stationarity_tol``, status 1) are located on the dense output by
bisection and end that trajectory only. A trajectory whose step size collapses (status -1) or that
exceeds the evaluation budget (status -2) ends with its own message; the others run on.

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
_TI_REAL = _TI[0]
_TI_COMPLEX = _TI[1] + 1j * _TI[2]
_P = np.array(
    [
        [13 / 3 + 7 * _S6 / 3, -23 / 3 - 22 * _S6 / 3, 10 / 3 + 5 * _S6],
        [13 / 3 - 7 * _S6 / 3, -23 / 3 + 22 * _S6 / 3, 10 / 3 - 5 * _S6],
        [1 / 3, -8 / 3, 10 / 3],
    ]
)
_NEWTON_MAXITER = 6
_MIN_FACTOR, _MAX_FACTOR = 0.2, 10.0
_EPS = np.finfo(float).eps


def _rms(x, axes):
    return np.sqrt(np.mean(x * x, axis=axes))


def _dense(y_old, Q, x):
    """Collocation polynomial: ``y_old + Q @ (x, x², x³)``; y_old (N, n), Q (N, n, 3), x (N,)."""
    x2 = x * x
    return y_old + Q[:, :, 0] * x[:, None] + Q[:, :, 1] * x2[:, None] + Q[:, :, 2] * (x2 * x)[:, None]


def _locate(fun, y_old, Q, n_iter=42):
    """Smallest x in (0, 1] (bisection) where ``fun`` of the dense output becomes <= 0 (``fun(x=1) <= 0``)."""
    N = y_old.shape[0]
    lo, hi = np.zeros(N), np.ones(N)
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        below = fun(_dense(y_old, Q, mid)) <= 0
        hi = np.where(below, mid, hi)
        lo = np.where(below, lo, mid)
    return hi


def radau_batch(model, y0, t_out, *, rtol, atol, stationarity_tol, budget):
    """Integrate the flows of ``model`` from the rows of ``y0`` (shape (B, n)), output at ``t_out``.

    Returns a dict of arrays: ``status, message, Y_out (B, T, n; NaN after a stop), t_stop, y_stop,
    nfev, njev, nlu, n_steps, seconds``.
    """
    K = model.batch_kernels()
    t_end = float(t_out[-1])
    B, n = y0.shape
    T = t_out.size
    Y_out = np.full((B, T, n), np.nan)
    Y_out[:, 0] = y0
    nxt = np.ones(B, dtype=np.int64)  # index of the next output time of each trajectory
    status = np.zeros(B, dtype=np.int64)
    msgs = [""] * B
    t_stop = np.full(B, t_end)
    y_stop = y0.copy()
    nfev = np.zeros(B, dtype=np.int64)
    njev = np.zeros(B, dtype=np.int64)
    nlu = np.zeros(B, dtype=np.int64)
    nsteps = np.zeros(B, dtype=np.int64)
    start = time.perf_counter()

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        f0 = K.rhs(y0)
        nfev += 1
        g0 = np.sqrt(np.sum(f0 * f0, axis=1))
        done = np.zeros(B, dtype=bool)
        if stationarity_tol > 0:
            stat0 = g0 < stationarity_tol
            status[stat0] = int(Status.STATIONARY)
            t_stop[stat0] = 0.0
            done |= stat0
        # per-trajectory solver state
        t = np.zeros(B)
        y = y0.copy()
        f = f0
        # initial step (scipy's select_initial_step, order 5, per trajectory)
        scale0 = atol + np.abs(y0) * rtol
        d0 = _rms(y0 / scale0, 1)
        d1 = _rms(f0 / scale0, 1)
        h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / np.where(d1 > 0, d1, 1.0))
        h0 = np.minimum(h0, t_end)
        y1 = y0 + h0[:, None] * f0
        f1 = K.rhs(y1)
        nfev += 1
        d2 = _rms((f1 - f0) / scale0, 1) / h0
        big = np.maximum(d1, d2)
        h1 = np.where(big <= 1e-15, np.maximum(1e-6, h0 * 1e-3), (0.01 / np.where(big > 0, big, 1.0)) ** (1 / 6))
        h = np.minimum(np.minimum(100 * h0, h1), t_end)
        h_old = np.full(B, np.nan)
        err_old = np.full(B, np.nan)
        rejected = np.zeros(B, dtype=bool)
        Q = np.zeros((B, n, 3))
        have_Q = np.zeros(B, dtype=bool)
        t_prev_old, h_prev, y_prev_old = np.zeros(B), np.ones(B), np.zeros((B, n))  # the last accepted step
        newton_tol = max(10 * _EPS / rtol, min(0.03, rtol**0.5))
        eye = np.eye(n)

        while True:
            idx = np.flatnonzero(~done)
            if idx.size == 0:
                break
            ya, ta, fa = y[idx], t[idx], f[idx]
            ha = np.minimum(h[idx], t_end - ta)
            min_step = 10 * np.abs(np.nextafter(ta, np.inf) - ta)
            tiny = ha < min_step
            if np.any(tiny):
                for b in idx[tiny]:
                    status[b] = int(Status.SOLVER_FAILED)
                    msgs[b] = (
                        f"{status_message(Status.SOLVER_FAILED, model)} The step size collapsed at t = {t[b]:.4g}."
                    )
                    t_stop[b], y_stop[b] = t[b], y[b]
                done[idx[tiny]] = True
                continue
            over = nfev[idx] > budget
            if np.any(over):
                for b in idx[over]:
                    status[b] = int(Status.BUDGET_EXHAUSTED)
                    msgs[b] = (
                        f"{status_message(Status.BUDGET_EXHAUSTED, model, budget=budget)} Stopped at t = {t[b]:.4g}."
                    )
                    t_stop[b], y_stop[b] = t[b], y[b]
                done[idx[over]] = True
                continue
            Na = idx.size
            # Jacobian and the inverses of the two iteration matrices, for the whole working set
            J = K.jac(ya)
            njev[idx] += 1
            nlu[idx] += 1
            Ar = (_MU_REAL / ha)[:, None, None] * eye - J
            Ac = (_MU_COMPLEX / ha)[:, None, None] * eye - J
            ok_mat = np.all(np.isfinite(J), axis=(1, 2))
            Ar[~ok_mat] = eye
            Ac[~ok_mat] = eye
            try:
                inv_r = np.linalg.inv(Ar)
                inv_c = np.linalg.inv(Ac)
            except np.linalg.LinAlgError:
                inv_r = np.empty_like(Ar)
                inv_c = np.empty_like(Ac)
                for k in range(Na):
                    try:
                        inv_r[k] = np.linalg.inv(Ar[k])
                        inv_c[k] = np.linalg.inv(Ac[k])
                    except np.linalg.LinAlgError:
                        ok_mat[k] = False
                        inv_r[k], inv_c[k] = eye, eye
            # Newton (simplified) on the collocation system
            Z0 = np.zeros((Na, 3, n))
            hq = have_Q[idx]
            if np.any(hq):
                # extrapolate the previous collocation polynomial to the new stage times
                x = (ta[hq, None] + ha[hq, None] * _C[None, :] - t_prev_old[idx[hq], None]) / h_prev[idx[hq], None]
                p = np.stack([x, x * x, x * x * x], axis=1)  # (Nh, 3 powers, 3 stages)
                Z0[hq] = (y_prev_old[idx[hq]][:, :, None] + np.matmul(Q[idx[hq]], p)).transpose(0, 2, 1) - ya[
                    hq, None, :
                ]
            scale = atol + np.abs(ya) * rtol
            W = np.matmul(_TI, Z0)
            Z = Z0
            Mr = _MU_REAL / ha
            Mc = _MU_COMPLEX / ha
            conv = np.zeros(Na, dtype=bool)
            fail = ~ok_mat
            n_iter = np.zeros(Na, dtype=np.int64)
            rate = np.full(Na, np.nan)
            dW_old = np.full(Na, np.nan)
            for k in range(_NEWTON_MAXITER):
                live = ~(conv | fail)
                if not np.any(live):
                    break
                F = K.rhs((ya[:, None, :] + Z).reshape(Na * 3, n)).reshape(Na, 3, n)
                nfev[idx[live]] += 3
                finite = np.all(np.isfinite(F), axis=(1, 2))
                fail |= live & ~finite
                live &= finite
                f_real = np.matmul(_TI_REAL, F) - Mr[:, None] * W[:, 0]
                f_cplx = np.matmul(_TI_COMPLEX, F) - Mc[:, None] * (W[:, 1] + 1j * W[:, 2])
                dWr = np.sum(inv_r * f_real[:, None, :], axis=2)
                dWc = np.sum(inv_c * f_cplx[:, None, :], axis=2)
                dW = np.stack([dWr, dWc.real, dWc.imag], axis=1)
                dW_norm = _rms(dW / scale[:, None, :], (1, 2))
                n_iter[live] = k + 1
                has_old = ~np.isnan(dW_old)
                new_rate = np.where(has_old, dW_norm / np.where(has_old, dW_old, 1.0), np.nan)
                rate = np.where(live, new_rate, rate)
                diverge = (
                    live
                    & has_old
                    & ((new_rate >= 1) | (new_rate ** (_NEWTON_MAXITER - k) / (1 - new_rate) * dW_norm > newton_tol))
                )
                fail |= diverge
                upd = live & ~diverge
                W = np.where(upd[:, None, None], W + dW, W)
                Z = np.where(upd[:, None, None], np.matmul(_T, W), Z)
                conv_now = upd & ((dW_norm == 0) | (has_old & (new_rate / (1 - new_rate) * dW_norm < newton_tol)))
                conv |= conv_now
                dW_old = np.where(live, dW_norm, dW_old)
            not_conv = ~conv
            if np.any(not_conv):
                bi = idx[not_conv]
                h[bi] = ha[not_conv] * 0.5
                rejected[bi] = True
            if not np.any(conv):
                continue
            # error estimate of the converged ones
            ci = np.flatnonzero(conv)
            bc = idx[ci]
            yc, hc, Zc = ya[ci], ha[ci], Z[ci]
            y_new = yc + Zc[:, 2]
            ZE = np.matmul(_E, Zc) / hc[:, None]
            err = np.matmul(inv_r[ci], (fa[ci] + ZE)[:, :, None])[:, :, 0]
            sc = atol + np.maximum(np.abs(yc), np.abs(y_new)) * rtol
            err_norm = _rms(err / sc, 1)
            rj = rejected[bc] & (err_norm > 1)
            if np.any(rj):
                f_rj = K.rhs(yc[rj] + err[rj])
                nfev[bc[rj]] += 1
                err2 = np.matmul(inv_r[ci][rj], (f_rj + ZE[rj])[:, :, None])[:, :, 0]
                err_norm[rj] = _rms(err2 / sc[rj], 1)
            err_norm = np.where(np.isfinite(err_norm), err_norm, np.inf)
            safety = 0.9 * (2 * _NEWTON_MAXITER + 1) / (2 * _NEWTON_MAXITER + n_iter[ci])
            two = ~np.isnan(h_old[bc]) & ~np.isnan(err_old[bc]) & (err_norm > 0)
            mult = np.where(
                two,
                hc
                / np.where(two, h_old[bc], 1.0)
                * (np.where(two, err_old[bc], 1.0) / np.where(two, err_norm, 1.0)) ** 0.25,
                1.0,
            )
            factor = np.minimum(1.0, mult) * np.where(err_norm > 0, err_norm, 1e-300) ** -0.25
            acc = err_norm <= 1
            # rejected steps: shrink
            if np.any(~acc):
                br = bc[~acc]
                h[br] = hc[~acc] * np.maximum(_MIN_FACTOR, safety[~acc] * factor[~acc])
                rejected[br] = True
            if not np.any(acc):
                continue
            ba = bc[acc]
            t_old_a = t[ba].copy()
            y_old_a = yc[acc]
            h_a = hc[acc]
            y_new_a = y_new[acc]
            Q_a = np.matmul(Zc[acc].transpose(0, 2, 1), _P)
            t_new_a = t_old_a + h_a
            t_new_a = np.where(t_end - t_new_a < 10 * np.abs(np.nextafter(t_end, np.inf) - t_end), t_end, t_new_a)
            f_new_a = K.rhs(y_new_a)
            nfev[ba] += 1
            nsteps[ba] += 1
            fac = np.minimum(_MAX_FACTOR, safety[acc] * factor[acc])
            h_old[ba] = h_a
            err_old[ba] = err_norm[acc]
            h[ba] = h_a * fac
            rejected[ba] = False
            # events: overflow cap and stationarity at the new state, located on the dense output
            ev_t = np.full(ba.size, np.inf)
            ev_kind = np.zeros(ba.size, dtype=np.int64)
            hit = ~(K.margin(y_new_a) > 0)
            if np.any(hit):
                xs = _locate(K.margin, y_old_a[hit], Q_a[hit])
                ev_t[hit] = t_old_a[hit] + xs * h_a[hit]
                ev_kind[hit] = int(Status.LEFT_DOMAIN)
            if stationarity_tol > 0:
                gn = np.sqrt(np.sum(f_new_a * f_new_a, axis=1))
                hit_s = gn < stationarity_tol
                if np.any(hit_s):
                    xs = _locate(
                        lambda yy: np.log(K.grad_norm(yy) + 1e-300) - math.log(stationarity_tol),
                        y_old_a[hit_s],
                        Q_a[hit_s],
                    )
                    ts = t_old_a[hit_s] + xs * h_a[hit_s]
                    sel = np.flatnonzero(hit_s)
                    earlier = ts < ev_t[sel]
                    ev_t[sel[earlier]] = ts[earlier]
                    ev_kind[sel[earlier]] = int(Status.STATIONARY)
            stop_here = ev_kind > 0
            t_lim = np.where(stop_here, ev_t, t_new_a)
            # dense output at the output times in (t_old, t_lim]
            while True:
                k_next = nxt[ba]
                inside = k_next < T
                tk = np.where(inside, t_out[np.minimum(k_next, T - 1)], np.inf)
                want = inside & (tk <= t_lim)
                if stop_here.any():
                    want &= ~(stop_here & (tk >= t_lim))
                if not np.any(want):
                    break
                wi = np.flatnonzero(want)
                x = (tk[wi] - t_old_a[wi]) / h_a[wi]
                Y_out[ba[wi], k_next[wi]] = _dense(y_old_a[wi], Q_a[wi], x)
                nxt[ba[wi]] += 1
            # advance
            t[ba] = t_new_a
            y[ba] = y_new_a
            f[ba] = f_new_a
            Q[ba] = Q_a
            have_Q[ba] = True
            t_prev_old[ba] = t_old_a
            h_prev[ba] = h_a
            y_prev_old[ba] = y_old_a
            if np.any(stop_here):
                si = np.flatnonzero(stop_here)
                bs = ba[si]
                xs = (ev_t[si] - t_old_a[si]) / h_a[si]
                y_ev = _dense(y_old_a[si], Q_a[si], xs)
                status[bs] = ev_kind[si]
                t_stop[bs] = ev_t[si]
                y_stop[bs] = y_ev
                done[bs] = True
            fin = (~stop_here) & (t_new_a >= t_end)
            if np.any(fin):
                bf = ba[fin]
                # the last output time is t_end itself
                Y_out[bf, T - 1] = y_new_a[fin]
                y_stop[bf] = y_new_a[fin]
                t_stop[bf] = t_end
                done[bf] = True
    seconds = time.perf_counter() - start
    for b in range(B):
        if not msgs[b]:
            msgs[b] = status_message(int(status[b]), model)
    return {
        "status": status,
        "message": tuple(msgs),
        "Y_out": Y_out,
        "t_stop": t_stop,
        "y_stop": y_stop,
        "nfev": nfev,
        "njev": njev,
        "nlu": nlu,
        "n_steps": nsteps,
        "seconds": seconds,
    }
