"""Kernel functions and blocked kernel matrices (dense and CSR)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import linear_kernel, polynomial_kernel, rbf_kernel

from solver.core.kernels import Kernel, kernel_diag, kernel_matrix, rkhs_sq_distance, row_sq_norms

KERNELS = [
    (Kernel("linear"), lambda A, B: linear_kernel(A, B)),
    (Kernel("rbf", gamma=1.7), lambda A, B: rbf_kernel(A, B, gamma=1.7)),
    (Kernel("poly", gamma=0.4, degree=3, coef0=0.5),
     lambda A, B: polynomial_kernel(A, B, degree=3, gamma=0.4, coef0=0.5)),
]


def _sparse_data(m, n, density, seed):
    return sp.random(m, n, density=density, format="csr", random_state=seed,
                     data_rvs=np.random.default_rng(seed).random)


@pytest.mark.parametrize(("kernel", "ref"), KERNELS, ids=lambda k: getattr(k, "name", ""))
def test_dense_and_sparse_blocks_match_reference(kernel, ref):
    A = _sparse_data(57, 9, 0.4, 1)
    B = _sparse_data(23, 9, 0.4, 2)
    Ad, Bd = A.toarray(), B.toarray()
    want_ab, want_aa = ref(Ad, Bd), ref(Ad, Ad)
    for a, b in [(Ad, Bd), (A, B), (A, Bd), (Ad, B)]:
        np.testing.assert_allclose(kernel_matrix(kernel, a, b, block_elems=50), want_ab,
                                   rtol=1e-12, atol=1e-12)
    # symmetric path (upper block triangle mirrored), tiny and default blocks
    for a in (Ad, A):
        for be in (30, 1 << 22):
            np.testing.assert_allclose(kernel_matrix(kernel, a, block_elems=be), want_aa,
                                       rtol=1e-12, atol=1e-12)
    out = np.zeros((57, 23), dtype=np.float32)
    kernel_matrix(kernel, Ad, Bd, out=out)
    np.testing.assert_allclose(out, want_ab, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(kernel_diag(kernel, A), np.diag(want_aa), rtol=1e-12)
    np.testing.assert_allclose(kernel_diag(kernel, Ad), np.diag(want_aa), rtol=1e-12)


def test_dense_blocks_grow_with_features_between_the_bounds_and_sparse_keep_the_largest():
    from solver.core import kernels

    lo, hi = kernels._MIN_BLOCK_ELEMS, kernels._BLOCK_ELEMS
    sizes = [kernels.block_elems_for(np.zeros((2, d)), np.zeros((2, d)))
             for d in (1, 22, 64, 65, 123, 256, 2000)]
    assert sizes == sorted(sizes) and sizes[0] == lo and sizes[-1] == hi
    assert sizes[2] == lo < sizes[3] < sizes[4] < hi == sizes[5]
    # a few features: blocks of a quarter of the largest (the inner products stay in cache)
    assert sizes[1] * 4 == hi
    A = _sparse_data(4, 22, 0.5, 3)
    assert kernels.block_elems_for(A, A.toarray()) == kernels.block_elems_for(A, A) == hi


@pytest.mark.parametrize("features", [22, 123])
def test_the_default_blocks_give_the_values_of_one_block(features):
    # several default-sized blocks against a single block of every row, dense inner products
    from solver.core.kernels import block_elems_for, kernel_combination

    rng = np.random.default_rng(features)
    B = rng.random((300, features))
    rows = 3 * block_elems_for(B, B) // B.shape[0] + 7  # three full blocks and a part
    A = rng.random((rows, features))
    kernel = Kernel("rbf", gamma=1.0 / features)
    whole = kernel_matrix(kernel, A, B, block_elems=rows * B.shape[0])
    np.testing.assert_allclose(kernel_matrix(kernel, A, B), whole, rtol=1e-13, atol=0)
    coef = rng.normal(size=B.shape[0])
    np.testing.assert_allclose(kernel_combination(kernel, A, B, coef), whole @ coef,
                               rtol=1e-10, atol=1e-10)


def test_rbf_values_far_apart_underflow_to_zero_not_nan():
    A = np.array([[0.0, 0.0], [100.0, 0.0]])
    K = kernel_matrix(Kernel("rbf", gamma=50.0), A)
    assert np.all(np.isfinite(K))
    np.testing.assert_allclose(K, np.eye(2), atol=0)


def test_rkhs_distance():
    rng = np.random.default_rng(0)
    A, B = rng.random((12, 4)), rng.random((7, 4))
    D = rkhs_sq_distance(Kernel("linear"), A, B)
    np.testing.assert_allclose(D, ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1), atol=1e-12)
    k = Kernel("rbf", gamma=3.0)
    D = rkhs_sq_distance(k, A, A)
    assert np.all(D >= 0)
    np.testing.assert_allclose(np.diag(D), 0.0, atol=1e-12)
    np.testing.assert_allclose(D, 2 - 2 * rbf_kernel(A, A, gamma=3.0), atol=1e-12)


def test_wide_sparse_input_is_never_densified():
    # densifying this matrix would need 4 GB; the kernel block is only 40 x 40
    m, n = 40, 10_000_000
    rng = np.random.default_rng(0)
    cols = rng.choice(n, size=(m, 5), replace=True)
    rows = np.repeat(np.arange(m), 5)
    X = sp.csr_matrix((rng.random(m * 5), (rows, cols.ravel())), shape=(m, n))
    X.sum_duplicates()
    K = kernel_matrix(Kernel("rbf", gamma=0.5), X)
    dense_small = X[:, np.unique(X.indices)].toarray()
    np.testing.assert_allclose(K, rbf_kernel(dense_small, gamma=0.5), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(row_sq_norms(X), (dense_small**2).sum(1), rtol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"name": "sigmoid"}, "name"),
        ({"name": "rbf", "gamma": 0.0}, "gamma"),
        ({"name": "rbf", "gamma": float("nan")}, "gamma"),
        ({"name": "poly", "degree": 0}, "degree"),
        ({"name": "poly", "degree": 2.5}, "degree"),
        ({"name": "poly", "coef0": float("inf")}, "coef0"),
    ],
)
def test_bad_kernel_parameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Kernel(**kwargs)


def test_feature_mismatch_is_an_error():
    with pytest.raises(ValueError, match="features"):
        kernel_matrix(Kernel("linear"), np.ones((3, 2)), np.ones((3, 4)))


@pytest.mark.parametrize("shape", [(10, 7), (2048, 4096)])  # np.empty, and an mmap of 32 MB
def test_work_buffers_are_writable_c_arrays_of_the_requested_shape(shape):
    from solver.core import buffers

    a = buffers.empty(shape, np.float32)
    assert a.shape == shape and a.dtype == np.float32
    assert a.flags.c_contiguous and a.flags.writeable
    a[...] = 1.5
    a[-1, -1] = 2.0
    assert float(a.sum(dtype=np.float64)) == pytest.approx(1.5 * a.size + 0.5)
    big = a.nbytes >= 32 << 20
    assert (a.base is not None) == big  # the large one lives in its own mapping


def test_large_buffers_fall_back_to_map_populate(monkeypatch):
    # MADV_POPULATE_WRITE where the kernel has it (a mapping of the exact size), else None;
    # without it the array is a MAP_POPULATE mapping, the same array to its user
    import mmap

    from solver.core import buffers

    got = buffers._populated(48 << 20)
    assert got is None or (isinstance(got, mmap.mmap) and len(got) == 48 << 20)
    monkeypatch.setattr(buffers, "_populated", lambda nbytes, populate=None: None)
    a = buffers.empty((3072, 4096), np.float32)
    assert isinstance(memoryview(a.base.base).obj, mmap.mmap)  # its own mapping
    assert a.flags.writeable and a.flags.c_contiguous
    a[...] = 2.0
    assert float(a.sum(dtype=np.float64)) == 2.0 * a.size
    with buffers.reuse():  # the same inside a reuse block
        b = buffers.empty((3072, 4096), np.float32)
        b[...] = 3.0
        assert float(b[-1, -1]) == 3.0 and isinstance(memoryview(b.base.base).obj, mmap.mmap)


@pytest.mark.parametrize("name", ["linear", "rbf", "poly"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_kernel_combination_equals_the_matrix_product(name: str, sparse: bool) -> None:
    # decision values summed while the kernel values are made, block by block, equal the
    # stored kernel matrix times the coefficients (one problem or several)
    from solver.core.kernels import kernel_combination

    rng = np.random.default_rng(3)
    A, B = rng.random((70, 4)), rng.random((40, 4))
    A[A < 0.3] = 0.0
    kernel = Kernel(name, gamma=0.7, degree=3, coef0=0.5)
    K = kernel_matrix(kernel, A, B)
    for coef in (rng.normal(size=40), rng.normal(size=(40, 3))):
        a, b = (sp.csr_matrix(A), sp.csr_matrix(B)) if sparse else (A, B)
        got = kernel_combination(kernel, a, b, coef, block_elems=40 * 16)  # 16-row blocks
        assert got.shape == (70,) + coef.shape[1:]
        np.testing.assert_allclose(got, K @ coef, rtol=1e-12, atol=1e-12)


def test_exp_of_the_rbf_pass_is_within_1e_13_of_libm_and_zero_below_its_range() -> None:
    # the compiled exp (Cody-Waite reduction, polynomial, exponent bits) over the whole range
    # an RBF value can take: K = exp(-gamma d) with G = sa = 0 and sb = d
    from solver.core import _numba_kernels as nk

    x = np.concatenate([-np.linspace(0.0, 708.0, 400_001), -np.geomspace(1e-300, 1.0, 1001),
                        [0.0, -0.0, -1e-12, -707.999999]])
    out = np.empty((1, x.size))
    nk.rbf_finish(np.zeros((1, x.size)), np.zeros(1), -x, 1.0, out)
    want = np.exp(x)
    assert np.max(np.abs(out[0] - want) / want) < 1e-13
    assert np.all(out[0][x == 0.0] == 1.0)
    single = np.empty((1, x.size), dtype=np.float32)  # the shorter polynomial: within float32
    nk.rbf_finish(np.zeros((1, x.size)), np.zeros(1), -x, 1.0, single)
    tiny = want < 1e-37  # float32 subnormals
    assert np.max(np.abs(single[0] - want)[~tiny] / want[~tiny]) < 1.2e-7
    below = np.array([-708.001, -745.2, -1e6, -1e300])
    nk.rbf_finish(np.zeros((1, 4)), np.zeros(1), -below, 1.0, out[:, :4])
    assert out[0, :4].tolist() == [0.0] * 4


@pytest.mark.parametrize("d", [1, 2, 3, 4, 7, 12])
def test_rbf_of_few_features_comes_from_the_points_exactly_symmetric(d: int) -> None:
    # rows of at most DIRECT_RBF_MAX_FEATURES features: kernel values from the differences,
    # so far from the origin (where ||a||^2 + ||b||^2 - 2 a.b cancels) they stay exact to
    # rounding, K(A, A) is symmetric to the bit, and the combination matches the matrix
    from solver.core.kernels import DIRECT_RBF_MAX_FEATURES, kernel_combination

    assert d <= DIRECT_RBF_MAX_FEATURES
    rng = np.random.default_rng(d)
    A = 1e4 + rng.random((61, d))
    B = 1e4 + rng.random((37, d))
    kernel = Kernel("rbf", gamma=0.9)
    want = np.exp(-0.9 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(kernel_matrix(kernel, A, B), want, rtol=1e-13, atol=0)
    K = kernel_matrix(kernel, A)
    assert np.array_equal(K, K.T) and np.all(np.diag(K) == 1.0)
    f32 = kernel_matrix(kernel, A, B, dtype=np.float32)
    np.testing.assert_allclose(f32, want, rtol=1e-6, atol=1e-7)
    for coef in (rng.normal(size=37), rng.normal(size=(37, 3))):
        np.testing.assert_allclose(kernel_combination(kernel, A, B, coef), want @ coef,
                                   rtol=1e-12, atol=1e-12)
    # the inner-product path gets these wrong: its cancellation is what the direct one avoids
    wide = np.hstack([A, np.zeros((61, 13 - d))])
    far = kernel_matrix(kernel, wide, np.hstack([B, np.zeros((37, 13 - d))]))
    assert np.max(np.abs(far - want)) > 1e-9


def test_reused_mappings_never_hold_a_live_array(monkeypatch) -> None:
    # inside buffers.reuse() a large array's mapping goes to the next request of about its
    # size once the array and every view of it are gone, never while one is alive; the kept
    # mappings end with the block
    from solver.core import buffers

    n = 40 << 20  # bytes, over the 32 MB floor
    with buffers.reuse():
        a = buffers.empty(n // 8)
        a[...] = 1.0
        view = a[5:]
        address = a.ctypes.data
        del a
        b = buffers.empty(n // 8)  # the view keeps the first mapping busy
        assert b.ctypes.data != address and not np.shares_memory(b, view)
        b[...] = 2.0
        assert np.all(view == 1.0)
        del view
        c = buffers.empty((n + (1 << 20)) // 4, np.float32)  # a little larger: headroom
        assert c.ctypes.data == address and c.flags.writeable and c.flags.c_contiguous
        c[...] = 3.0
        assert np.all(b == 2.0)
        del c
        small = buffers.empty(n // 8 // 3)  # under half the mapping: a mapping of its own
        assert small.ctypes.data != address
        del small
        again = buffers.empty(n // 8)  # the small request left the larger free one kept
        assert again.ctypes.data == address
        del b, again
    assert buffers._ARENA.get() is None
