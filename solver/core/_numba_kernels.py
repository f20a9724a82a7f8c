"""Compiled inner loops of the ODM dual coordinate-descent solvers (numba, ``cache=True``).

Both solvers update one instance's pair ``(zeta_i, beta_i)`` at a time, exactly.  With the
other variables fixed, let ``r = u_i - K_ii (zeta_i - beta_i)`` be the margin the instance
would have without its own contribution.  The 2-variable problem

    1/2 K_ii (z - b)^2 + r (z - b) + dz/2 z^2 + db/2 b^2 + (theta-1) z + (theta+1) b,  z, b >= 0

(dz = M c upsilon, db = M c) has the closed-form minimiser

    r < 1-theta:  z = (1-theta-r)/(K_ii+dz), b = 0
    r > 1+theta:  z = 0, b = (r-1-theta)/(K_ii+db)
    otherwise:    z = b = 0

(the zeta side and the beta side cannot both be positive because 1-theta < 1+theta; one checks
that the gradient of the zero variable is then nonnegative, so this is the joint optimum).

``dz`` and ``db`` are per-instance arrays: with sample weights ``c_i`` the loss term of
instance i is multiplied by ``c_i``, which divides its dual diagonal terms by ``c_i``
(:func:`solver.core.formulation.diag_vectors`); unweighted problems pass constant arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# updates whose projected-gradient violation is below this are skipped (as in LIBLINEAR)
SKIP = 1e-12


@njit(cache=True, inline="always")
def _pair_step(ui, z, b, kii, dz, db, theta):
    """Violation of the pair and its exact new values ``(viol, gz, gb, new_z, new_b)``."""
    gz = ui + dz * z + theta - 1.0
    gb = -ui + db * b + theta + 1.0
    vz = abs(gz) if z > 0.0 else max(-gz, 0.0)
    vb = abs(gb) if b > 0.0 else max(-gb, 0.0)
    v = vz if vz > vb else vb
    r = ui - kii * (z - b)
    nz = 0.0
    nb = 0.0
    if r < 1.0 - theta:
        nz = (1.0 - theta - r) / (kii + dz)
    elif r > 1.0 + theta:
        nb = (r - 1.0 - theta) / (kii + db)
    return v, gz, gb, nz, nb


# updates of kernel_sweep applied to f together: one pass over f reads BLOCK columns, so
# the columns stream from memory side by side (docs/design-notes.md, "Four columns per pass")
BLOCK = 4


@njit(cache=True, inline="always")
def _apply(f, cache, slots, coef, n):
    """``f += sum_k coef[k] * cache[slots[k]]`` for the first ``n`` pending updates."""
    m = f.shape[0]
    if n == BLOCK:
        c0 = cache[slots[0]]
        c1 = cache[slots[1]]
        c2 = cache[slots[2]]
        c3 = cache[slots[3]]
        d0 = coef[0]
        d1 = coef[1]
        d2 = coef[2]
        d3 = coef[3]
        for j in range(m):
            f[j] += (d0 * c0[j] + d1 * c1[j]) + (d2 * c2[j] + d3 * c3[j])
        return
    for k in range(n):
        col = cache[slots[k]]
        d = coef[k]
        for j in range(m):
            f[j] += d * col[j]


@njit(cache=True)
def kernel_sweep(order, start, stop, slot, cache, last_used, tick, kdiag, y, alpha, f,
                 dz, db, theta, active, shrink_thr, shrinking, stats, skip, skip_face):
    """Visit ``order[start:stop]``; ``f = K nu`` (nu = y (zeta - beta)) is kept for all m.

    An update is skipped where the violation is at most ``skip``, and for an instance with a
    nonzero dual where it is at most ``skip_face``: such a step moves the iterate least, yet
    costs a whole kernel column like any other.

    Returns the position reached: ``stop`` when done, or the position of the first instance
    whose update needs a kernel column that is not cached (``slot[i] < 0``); nothing is
    changed for that instance, so the caller fetches the column and resumes there.
    ``stats`` accumulates [max violation seen, number shrunk, number of updates].

    The updates are exact and in order, but ``f`` takes them ``BLOCK`` at a time: until then
    an instance's margin adds the pending updates' entries of its own row (``K`` is
    symmetric, so ``cache[s][i]`` is ``K(i, i_s)``). ``f`` is whole again on return.
    """
    slots = np.empty(BLOCK, dtype=np.int64)
    coef = np.empty(BLOCK)
    n = 0
    for p in range(start, stop):
        i = order[p]
        z = alpha[i, 0]
        b = alpha[i, 1]
        yi = y[i]
        fi = f[i]
        for k in range(n):
            fi += coef[k] * cache[slots[k]][i]
        v, gz, gb, nz, nb = _pair_step(yi * fi, z, b, kdiag[i], dz[i], db[i], theta)
        if shrinking and z == 0.0 and b == 0.0 and gz > shrink_thr and gb > shrink_thr:
            active[i] = False
            stats[1] += 1.0
            continue
        if v > stats[0]:
            stats[0] = v
        if v <= skip or v <= skip_face and (z > 0.0 or b > 0.0):
            continue
        d = (nz - nb) - (z - b)
        if d == 0.0:
            alpha[i, 0] = nz
            alpha[i, 1] = nb
            continue
        s = slot[i]
        if s < 0:
            _apply(f, cache, slots, coef, n)
            return p
        last_used[s] = tick
        alpha[i, 0] = nz
        alpha[i, 1] = nb
        slots[n] = s
        coef[n] = d * yi
        n += 1
        stats[2] += 1.0
        if n == BLOCK:
            _apply(f, cache, slots, coef, n)
            n = 0
    _apply(f, cache, slots, coef, n)
    return stop


@njit(cache=True)
def pair_violations(f, y, alpha, dz, db, theta, out):
    """Per-instance max projected-gradient violation given ``f`` (u_i = y_i f_i)."""
    for i in range(f.shape[0]):
        v, gz, gb, nz, nb = _pair_step(y[i] * f[i], alpha[i, 0], alpha[i, 1], 1.0, dz[i],
                                       db[i], theta)
        out[i] = v
    return out


@njit(cache=True)
def linear_sweep_dense(order, X, y, sqn, alpha, w, dz, db, theta, active, shrink_thr,
                       shrinking, stats):
    """One LIBLINEAR-style pass over ``order`` for dense X, maintaining ``w = X' nu``."""
    n = X.shape[1]
    for p in range(order.shape[0]):
        i = order[p]
        xi = X[i]
        acc = 0.0
        for k in range(n):
            acc += w[k] * xi[k]
        z = alpha[i, 0]
        b = alpha[i, 1]
        yi = y[i]
        v, gz, gb, nz, nb = _pair_step(yi * acc, z, b, sqn[i], dz[i], db[i], theta)
        if shrinking and z == 0.0 and b == 0.0 and gz > shrink_thr and gb > shrink_thr:
            active[i] = False
            stats[1] += 1.0
            continue
        if v > stats[0]:
            stats[0] = v
        if v <= SKIP:
            continue
        d = (nz - nb) - (z - b)
        alpha[i, 0] = nz
        alpha[i, 1] = nb
        if d != 0.0:
            dd = d * yi
            for k in range(n):
                w[k] += dd * xi[k]
            stats[2] += 1.0


@njit(cache=True)
def linear_sweep_csr(order, indptr, indices, data, y, sqn, alpha, w, dz, db, theta, active,
                     shrink_thr, shrinking, stats):
    """One LIBLINEAR-style pass over ``order`` for CSR X, O(nnz) per pass."""
    for p in range(order.shape[0]):
        i = order[p]
        s0 = indptr[i]
        s1 = indptr[i + 1]
        acc = 0.0
        for k in range(s0, s1):
            acc += w[indices[k]] * data[k]
        z = alpha[i, 0]
        b = alpha[i, 1]
        yi = y[i]
        v, gz, gb, nz, nb = _pair_step(yi * acc, z, b, sqn[i], dz[i], db[i], theta)
        if shrinking and z == 0.0 and b == 0.0 and gz > shrink_thr and gb > shrink_thr:
            active[i] = False
            stats[1] += 1.0
            continue
        if v > stats[0]:
            stats[0] = v
        if v <= SKIP:
            continue
        d = (nz - nb) - (z - b)
        alpha[i, 0] = nz
        alpha[i, 1] = nb
        if d != 0.0:
            dd = d * yi
            for k in range(s0, s1):
                w[indices[k]] += dd * data[k]
            stats[2] += 1.0


@njit(cache=True)
def violations_from_margins(u, alpha, dz, db, theta, out):
    """Per-instance violation given the margins ``u_i = y_i w.x_i``."""
    for i in range(u.shape[0]):
        v, gz, gb, nz, nb = _pair_step(u[i], alpha[i, 0], alpha[i, 1], 1.0, dz[i], db[i], theta)
        out[i] = v
    return out


def warmup() -> None:
    """Compile (or load from the on-disk cache) every loop once, on tiny inputs, with the
    argument types the solvers pass (numba compiles once per type signature)."""
    y = np.ones(2)
    a = np.zeros((2, 2))
    f = np.zeros(2)
    act = np.ones(2, dtype=np.bool_)
    st = np.zeros(3)
    order = np.arange(2, dtype=np.int64)
    for dt in (np.float64, np.float32):
        kernel_sweep(order, 0, 2, np.arange(2, dtype=np.int64), np.eye(2, dtype=dt),
                     np.zeros(2, dtype=np.int64), 1, np.ones(2), y, a.copy(), f.copy(),
                     y, y, 0.1, act.copy(), np.inf, True, st.copy(), 1e-12, 1e-12)
    pair_violations(f, y, a, y, y, 0.1, np.empty(2))
    linear_sweep_dense(order, np.eye(2), y, y, a.copy(), f.copy(), y, y, 0.1, act.copy(),
                       np.inf, True, st.copy())
    linear_sweep_csr(order, np.arange(3, dtype=np.int32), np.arange(2, dtype=np.int32),
                     np.ones(2), y, y, a.copy(), f.copy(), y, y, 0.1, act.copy(), np.inf, True,
                     st.copy())
    violations_from_margins(f, a, y, y, 0.1, np.empty(2))
    rbf_combination(np.eye(2), f, f, 1.0, np.ones((2, 1)), np.zeros((2, 1)))
    for dt in (np.float64, np.float32):
        rbf_finish(np.eye(2), f, f, 1.0, np.empty((2, 2), dtype=dt))
        rbf_direct(np.eye(2), np.eye(2), 1.0, np.empty((2, 2), dtype=dt))
        poly_finish(np.eye(2), 1.0, 1.0, 3, np.empty((2, 2), dtype=dt))
        # the Newton steps' face products and face gathers, from either kernel storage
        rows_combination(np.eye(2, dtype=dt), order, f, np.empty(2))
        gather_block(np.eye(2, dtype=dt), order, order, np.empty((2, 2), dtype=np.float32))
    rbf_direct_combination(np.eye(2), np.eye(2), 1.0, np.ones((2, 1)), np.zeros((2, 1)))
    poly_combination(np.eye(2), 1.0, 1.0, 3, np.ones((2, 1)), np.zeros((2, 1)))
    drop_and_scale(np.eye(2, dtype=np.float32), np.float32(0.0), np.float32(1.0))


# ------------------------------------------------------------------ kernel-block finishing
_LOG2E = 1.4426950408889634
_LN2HI = 0.6931471803691238
_LN2LO = 1.9082149292705877e-10
_EXP_BITS_SHIFT = 4503599627370496.0 + 1023.0  # 2^52 + the exponent bias


@njit(cache=True, fastmath=True, inline="always")
def _exp_neg(x, single=False):
    """exp(x) for x <= 0 (0 below -708), branch-free so that a loop of it vectorises where
    libm's exp does not: Cody-Waite reduction ``x = k ln2 + r``, ``|r| <= ln2/2``, the Taylor
    polynomial of exp(r) in Estrin's scheme (a short dependency chain), and ``2^k`` from the
    bits of ``k + 1023 + 2^52`` shifted into the exponent field (no float-to-int conversion,
    which AVX2 lacks). Degree 11: relative error ~1e-14; ``single`` (a value stored as
    float32): degree 7, 5e-9, under float32's rounding."""
    under = x < -708.0
    x = max(x, -708.0)
    kf = np.floor(x * _LOG2E + 0.5)  # a float: math.floor is an int in numba
    r = (x - kf * _LN2HI) - kf * _LN2LO
    r2 = r * r
    r4 = r2 * r2
    b0 = (1.0 + r) + (1.0 / 2 + r * (1.0 / 6)) * r2
    b1 = (1.0 / 24 + r * (1.0 / 120)) + (1.0 / 720 + r * (1.0 / 5040)) * r2
    if single:
        p = b0 + b1 * r4
    else:
        b2 = (1.0 / 40320 + r * (1.0 / 362880)) + (1.0 / 3628800 + r * (1.0 / 39916800)) * r2
        p = b0 + (b1 + b2 * r4) * r4
    # k + 1023 in [2, 1023] sits in the low mantissa bits of this double, exactly
    biased = np.float64(kf + _EXP_BITS_SHIFT)
    e = p * np.int64(biased.view(np.int64) << 52).view(np.float64)
    return 0.0 if under else e


@njit(cache=True, fastmath=True, inline="always")
def _rbf(g, sa, sb, gamma, single=False):
    """``exp(-gamma * max(0, sa + sb - 2 g))`` from an inner product and two squared norms."""
    return _exp_neg(gamma * min(2.0 * g - sa - sb, 0.0), single)


@njit(cache=True, fastmath=True, inline="always")
def _poly(g, gamma, coef0, degree):
    """``(gamma g + coef0)^degree`` by repeated multiplication (integer degree)."""
    t = gamma * g + coef0
    acc = 1.0
    for _ in range(degree):
        acc *= t
    return acc


@njit(cache=True, fastmath=True)
def rbf_finish(G, sa, sb, gamma, out):
    """``out = exp(-gamma * max(0, sa_i + sb_j - 2 G_ij))`` in one pass (any out dtype; a
    float32 ``out`` gets the shorter polynomial of :func:`_exp_neg`)."""
    n, m = G.shape
    single = out.itemsize == 4  # a float32 matrix: the shorter polynomial
    for i in range(n):
        g = G[i]
        o = out[i]
        s = sa[i]
        for j in range(m):
            o[j] = _rbf(g[j], s, sb[j], gamma, single)


@njit(cache=True, fastmath=True, inline="always")
def _sq_dist_head(a, BT, acc):
    """``acc[j] = sum_k (a_k - BT[k, j])^2`` over all features but the last one or two
    (:func:`_sq_dist_rows` gives those), two features per pass; untouched if there are none
    (``acc`` then stays zero)."""
    d, m = BT.shape
    for k in range(0, d - 2 + d % 2, 2):
        a0 = a[k]
        a1 = a[k + 1]
        b0 = BT[k]
        b1 = BT[k + 1]
        if k == 0:
            for j in range(m):
                t0 = a0 - b0[j]
                t1 = a1 - b1[j]
                acc[j] = t0 * t0 + t1 * t1
        else:
            for j in range(m):
                t0 = a0 - b0[j]
                t1 = a1 - b1[j]
                acc[j] += t0 * t0 + t1 * t1


@njit(cache=True, fastmath=True, inline="always")
def _sq_dist_rows(a, BT, acc, zero):
    """The head's squared distances into ``acc`` (:func:`_sq_dist_head`), and ``(a_p, B_p,
    a_l, B_l)``: the last two features' values and rows of ``BT``, a zero feature standing
    in for the first when only one is left (odd ``d``), so that one vectorised loop adds
    ``(a_p - B_p[j])^2 + (a_l - B_l[j])^2`` either way."""
    _sq_dist_head(a, BT, acc)
    d = BT.shape[0]
    if d % 2 == 0:
        return a[d - 2], BT[d - 2], a[d - 1], BT[d - 1]
    return 0.0, zero, a[d - 1], BT[d - 1]


@njit(cache=True, fastmath=True, inline="always")
def _rbf_from_head(acc, ap, bp, al, bl, j, gamma, single=False):
    """``exp(-gamma ||a - B_j||^2)`` from the head's distance ``acc[j]`` and the tail's rows
    (:func:`_sq_dist_rows`)."""
    t0 = ap - bp[j]
    t1 = al - bl[j]
    return _exp_neg(-gamma * (acc[j] + (t0 * t0 + t1 * t1)), single)


@njit(cache=True, fastmath=True, nogil=True)
def rbf_direct(A, BT, gamma, out):
    """``out = exp(-gamma ||A_i - B_j||^2)`` from the points themselves (``BT`` is ``B``
    transposed, C-contiguous, at least one feature): a row of squared distances built two
    features per pass, the last one or two folded into the exp pass. For a few features this
    is cheaper than the inner products plus :func:`rbf_finish`, it has no cancellation, and
    ``K[i, j]`` and ``K[j, i]`` are equal to the bit (float32 ``out``: as in rbf_finish)."""
    m = BT.shape[1]
    acc = np.zeros(m)
    zero = np.zeros(m)
    single = out.itemsize == 4  # a float32 matrix: the shorter polynomial
    for i in range(A.shape[0]):
        ap, bp, al, bl = _sq_dist_rows(A[i], BT, acc, zero)
        o = out[i]
        for j in range(m):
            o[j] = _rbf_from_head(acc, ap, bp, al, bl, j, gamma, single)


@njit(cache=True, fastmath=True, nogil=True)
def rbf_direct_combination(A, BT, gamma, coef, out):
    """``out[i] += sum_j exp(-gamma ||A_i - B_j||^2) coef[j]`` (``coef`` ``(m, k)``, ``out``
    ``(n, k)``) from the points, the kernel values made as :func:`rbf_direct` makes them and
    summed as they are made."""
    m = BT.shape[1]
    k = coef.shape[1]
    acc = np.zeros(m)
    zero = np.zeros(m)
    for i in range(A.shape[0]):
        ap, bp, al, bl = _sq_dist_rows(A[i], BT, acc, zero)
        if k == 1:
            s = 0.0
            for j in range(m):
                s += _rbf_from_head(acc, ap, bp, al, bl, j, gamma) * coef[j, 0]
            out[i, 0] += s
        else:
            for j in range(m):
                kv = _rbf_from_head(acc, ap, bp, al, bl, j, gamma)
                for c in range(k):
                    out[i, c] += kv * coef[j, c]


@njit(cache=True, fastmath=True)
def poly_finish(G, gamma, coef0, degree, out):
    """``out = (gamma G + coef0)^degree`` in one pass (any out dtype)."""
    n, m = G.shape
    for i in range(n):
        g = G[i]
        o = out[i]
        for j in range(m):
            o[j] = _poly(g[j], gamma, coef0, degree)



@njit(cache=True)
def rows_combination(cache, rows, coef, out):
    """``out = sum_r coef[r] * cache[rows[r]]`` (float64 accumulation of any-dtype rows).

    With a symmetric kernel matrix this is ``K[:, rows] @ coef``: contiguous row reads only.
    Four rows are added per pass over ``out``, which then costs a quarter of the loads and
    stores (docs/design-notes.md, "A vector solve without potrs").
    """
    m = out.shape[0]
    for j in range(m):
        out[j] = 0.0
    nz = np.empty(rows.shape[0], dtype=np.int64)  # the terms with a nonzero coefficient
    k = 0
    for r in range(rows.shape[0]):
        if coef[r] != 0.0:
            nz[k] = r
            k += 1
    q = k - k % 4
    for t in range(0, q, 4):
        a, b, c, d = nz[t], nz[t + 1], nz[t + 2], nz[t + 3]
        ca, cb, cc, cd = coef[a], coef[b], coef[c], coef[d]
        ra, rb, rc, rd = cache[rows[a]], cache[rows[b]], cache[rows[c]], cache[rows[d]]
        for j in range(m):
            out[j] += ca * ra[j] + cb * rb[j] + cc * rc[j] + cd * rd[j]
    for t in range(q, k):
        ca = coef[nz[t]]
        ra = cache[rows[nz[t]]]
        for j in range(m):
            out[j] += ca * ra[j]
    return out


@njit(cache=True)
def gather_block(cache, rows, cols, out):
    """``out[i, j] = cache[rows[i], cols[j]]`` (any dtypes): the submatrix read in place,
    without the full rows a fancy-indexed copy makes first."""
    for i in range(rows.shape[0]):
        src = cache[rows[i]]
        o = out[i]
        for j in range(cols.shape[0]):
            o[j] = src[cols[j]]
    return out


@njit(cache=True, fastmath=True, nogil=True)
def rbf_combination(G, sa, sb, gamma, coef, out):
    """``out[i] += sum_j exp(-gamma * max(0, sa_i + sb_j - 2 G_ij)) coef[j]`` (``coef``
    ``(m, k)``, ``out`` ``(n, k)``): kernel values summed as they are made, never stored."""
    n, m = G.shape
    k = coef.shape[1]
    for i in range(n):
        g = G[i]
        s = sa[i]
        if k == 1:
            acc = 0.0
            for j in range(m):
                acc += _rbf(g[j], s, sb[j], gamma) * coef[j, 0]
            out[i, 0] += acc
        else:
            for j in range(m):
                kv = _rbf(g[j], s, sb[j], gamma)
                for c in range(k):
                    out[i, c] += kv * coef[j, c]


@njit(cache=True, fastmath=True, nogil=True)
def poly_combination(G, gamma, coef0, degree, coef, out):
    """``out[i] += sum_j (gamma G_ij + coef0)^degree coef[j]`` (as :func:`rbf_combination`)."""
    n, m = G.shape
    k = coef.shape[1]
    for i in range(n):
        g = G[i]
        for j in range(m):
            kv = _poly(g[j], gamma, coef0, degree)
            for c in range(k):
                out[i, c] += kv * coef[j, c]


# ------------------------------------------------------------------ factorization input
@njit(cache=True)
def drop_and_scale(A, tau, s):
    """``A_ij = 0`` where ``|A_ij| < tau``, else ``s * A_ij``, in place (no temporaries)."""
    n, m = A.shape
    for i in range(n):
        a = A[i]
        for j in range(m):
            a[j] = 0.0 if abs(a[j]) < tau else s * a[j]
