"""ONNX export of a fitted ODM / SODM model: the whole predictor as one graph.

``to_onnx(est)`` returns an ``onnx.ModelProto`` (``to_onnx_bytes`` its serialized bytes) that
maps raw feature rows ``X`` (float64 ``[N, d]``, or float32 with ``input_dtype``) to

* ``label``: the predicted labels in the model's own label values (int64, float64, string
  or bool tensor, like ``classes_``);
* ``decision_function``: ``[N]`` for two classes, ``[N, n_classes]`` one-vs-rest scores
  otherwise, as ``decision_function`` returns them;
* ``probabilities`` ``[N, n_classes]`` when the model was fitted with ``probability=True``
  (Platt's sigmoid per problem, one-vs-rest rows normalized to sum 1).

The graph uses standard ONNX operators only (opset 17, IR version 8, readable by every
onnxruntime since 1.12), computed in float64 so that it reproduces ``decision_function`` to
rounding: the min-max scaling (``(x - min) * scale``), then for a linear model ``Z W' + b``
(``b`` the weight of the constant intercept feature), for a kernel model the kernel values
against the support vectors (RBF: ``exp(-gamma max(0, |x|^2 + |z|^2 - 2 x.z))``; polynomial:
``(gamma (x.z + c) + coef0)^degree`` with ``c = 1`` when the intercept feature is on; linear:
``x.z + c``) times the dual coefficients; then ``ArgMax`` (or ``f > 0``) and a ``Gather``
from the classes. Support vectors are stored dense (sparse models are densified).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["to_onnx", "to_onnx_bytes", "OPSET", "IR_VERSION"]

OPSET = 17
IR_VERSION = 8
# protobuf messages are limited to 2 GiB; stay well below with the stored arrays
_MAX_BYTES = 1_500_000_000


class _Graph:
    """A small helper that names constants and nodes."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def const(self, value: np.ndarray, base: str = "c") -> str:
        from onnx import numpy_helper

        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def op(self, op_type: str, inputs: list[str], base: str | None = None,
           output: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        out = output or self.name(base or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def _classes_tensor(classes: np.ndarray) -> tuple[np.ndarray, int]:
    from onnx import TensorProto

    c = np.asarray(classes)
    if c.dtype.kind in "US" or c.dtype == object:
        return np.asarray([str(v) for v in c], dtype=object), TensorProto.STRING
    if c.dtype.kind == "b":
        return c.astype(np.bool_), TensorProto.BOOL
    if c.dtype.kind in "iu":
        return c.astype(np.int64), TensorProto.INT64
    return c.astype(np.float64), TensorProto.DOUBLE


def _dense(a) -> np.ndarray:
    return np.asarray(a.toarray() if sp.issparse(a) else a, dtype=np.float64)


def _decision(g: _Graph, est, Z: str) -> str:
    """Scores ``[N, n_problems]`` from the scaled input ``Z`` (no intercept column)."""
    d = int(est.n_features_in_)
    icpt = 1.0 if est.fit_intercept else 0.0
    if est.w_ is not None:
        W = np.asarray(est.w_, dtype=np.float64)
        F = g.op("MatMul", [Z, g.const(np.ascontiguousarray(W[:, :d].T), "w")], "linear")
        if est.fit_intercept:
            F = g.op("Add", [F, g.const(W[:, d] * icpt, "b")], "scores")
        return F
    sv = _dense(est.support_vectors_)
    coef = np.ascontiguousarray(np.asarray(est.dual_coef_, dtype=np.float64).T)  # [S, K]
    if sv.shape[0] == 0:
        zero = g.op("MatMul", [Z, g.const(np.zeros((d, coef.shape[1])), "zero")], "scores")
        return zero
    G = g.op("MatMul", [Z, g.const(np.ascontiguousarray(sv.T), "sv_t")], "inner")
    gamma = float(est.gamma_)
    if est.kernel == "rbf":
        zz = np.einsum("ij,ij->i", sv, sv)[None, :]
        xx = g.op("ReduceSum", [g.op("Mul", [Z, Z]), g.const(np.array([1], np.int64))],
                  "xx", keepdims=1)
        dist = g.op("Add", [g.op("Sub", [xx, g.op("Mul", [G, g.const(np.array(2.0))])]),
                            g.const(zz, "zz")], "dist")
        dist = g.op("Max", [dist, g.const(np.array(0.0))], "dist0")
        K = g.op("Exp", [g.op("Mul", [dist, g.const(np.array(-gamma))])], "kernel")
    elif est.kernel == "poly":
        base = g.op("Add", [g.op("Mul", [G, g.const(np.array(gamma))]),
                            g.const(np.array(gamma * icpt + float(est.coef0)))], "poly_base")
        K = g.op("Pow", [base, g.const(np.array(float(int(est.degree))))], "kernel")
    else:
        K = g.op("Add", [G, g.const(np.array(icpt))], "kernel") if icpt else G
    return g.op("MatMul", [K, g.const(coef, "dual_coef")], "scores")


def to_onnx(est, *, input_dtype=np.float64, name: str | None = None):
    """The ONNX graph of a fitted ``ODMClassifier`` / ``SODMClassifier`` (or baseline).

    ``input_dtype`` float64 (default) or float32 (cast to float64 inside). Needs the
    ``onnx`` package; raises ``ValueError`` for an unfitted model or one too large for a
    single protobuf (2 GiB).
    """
    import onnx
    from onnx import helper

    in_type, d = _checked_input(est, input_dtype)
    g = _Graph()
    F = _decision(g, est, _scaled_input(g, est, in_type))
    outputs = _label_outputs(g, est, F)
    probabilities = _probability_output(g, est, F)
    if probabilities is not None:
        outputs.append(probabilities)
    graph = helper.make_graph(
        g.nodes, name or f"sodm-{type(est).__name__}",
        [helper.make_tensor_value_info("X", in_type, ["N", d])], outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="sodm", ir_version=IR_VERSION,
                              doc_string="ODM / SODM classifier (solver.io.export.to_onnx)")
    meta = {"estimator": type(est).__name__, "kernel": est.kernel,
            "classes": ",".join(str(c) for c in est.classes_),
            "n_features_in": str(d)}
    onnx.helper.set_model_props(model, meta)
    onnx.checker.check_model(model)
    return model


def _checked_input(est, input_dtype) -> tuple[int, int]:
    """The ONNX element type of the input and its width; ``ValueError`` for an unfitted
    model, another dtype, or a model too large for one protobuf."""
    from onnx import TensorProto

    if not hasattr(est, "classes_"):
        raise ValueError("to_onnx needs a fitted estimator")
    in_type = {np.dtype(np.float64): TensorProto.DOUBLE,
               np.dtype(np.float32): TensorProto.FLOAT}.get(np.dtype(input_dtype))
    if in_type is None:
        raise ValueError("input_dtype must be float64 or float32")
    d = int(est.n_features_in_)
    n_sv = 0 if est.support_vectors_ is None else int(est.support_vectors_.shape[0])
    if 8 * (n_sv * d + est.n_support_.size * max(n_sv, d)) > _MAX_BYTES:
        raise ValueError(f"model too large for an ONNX file ({n_sv} support vectors x {d} "
                         "features, stored dense)")
    return in_type, d


def _scaled_input(g: _Graph, est, in_type: int) -> str:
    """The input as float64, min-max scaled when the model has a scaler."""
    from onnx import TensorProto

    X = "X"
    if in_type != TensorProto.DOUBLE:
        X = g.op("Cast", [X], "x64", to=TensorProto.DOUBLE)
    Z = X
    if est._scaler is not None:
        Z = g.op("Sub", [Z, g.const(est._scaler.min_.astype(np.float64), "min")], "shifted")
        Z = g.op("Mul", [Z, g.const(est._scaler.scale_.astype(np.float64), "scale")], "scaled")
    return Z


def _label_outputs(g: _Graph, est, F: str) -> list[Any]:
    """The ``label`` and ``decision_function`` outputs (the decision a vector for two
    classes, else one column per class) and their value infos."""
    from onnx import TensorProto, helper

    classes, label_type = _classes_tensor(est.classes_)
    cls = g.const(classes, "classes")
    n_classes = len(classes)
    outputs = []
    if n_classes == 2:
        f = g.op("Squeeze", [F, g.const(np.array([1], np.int64))], output="decision_function")
        idx = g.op("Cast", [g.op("Greater", [f, g.const(np.array(0.0))])], "idx",
                   to=TensorProto.INT64)
        outputs.append(helper.make_tensor_value_info("decision_function", TensorProto.DOUBLE,
                                                     ["N"]))
    else:
        g.op("Identity", [F], output="decision_function")
        idx = g.op("ArgMax", [F], "idx", axis=1, keepdims=0)
        outputs.append(helper.make_tensor_value_info("decision_function", TensorProto.DOUBLE,
                                                     ["N", n_classes]))
    g.op("Gather", [cls, idx], output="label", axis=0)
    outputs.insert(0, helper.make_tensor_value_info("label", label_type, ["N"]))
    return outputs


def _probability_output(g: _Graph, est, F: str) -> Any:
    """The ``probabilities`` output (Platt scaling; normalised over one-vs-rest classes)
    and its value info, or ``None`` for a model without calibration."""
    from onnx import TensorProto, helper

    platt = getattr(est, "platt_", None)
    if platt is None:
        return None
    n_classes = len(est.classes_)
    A = np.asarray(platt[:, 0], dtype=np.float64)
    B = np.asarray(platt[:, 1], dtype=np.float64)
    # p_k = 1 / (1 + exp(A_k f_k + B_k)) = sigmoid(-(A_k f_k + B_k))
    P = g.op("Sigmoid", [g.op("Add", [g.op("Mul", [F, g.const(-A, "platt_a")]),
                                      g.const(-B, "platt_b")])], "p")
    if n_classes == 2:
        P = g.op("Concat", [g.op("Sub", [g.const(np.array(1.0)), P]), P], "p2", axis=1)
        g.op("Identity", [P], output="probabilities")
    else:
        s = g.op("ReduceSum", [P, g.const(np.array([1], np.int64))], "psum", keepdims=1)
        g.op("Div", [P, g.op("Max", [s, g.const(np.array(1e-300))])],
             output="probabilities")
    return helper.make_tensor_value_info("probabilities", TensorProto.DOUBLE,
                                         ["N", n_classes])


def to_onnx_bytes(est, **kwargs: Any) -> bytes:
    """``to_onnx(est, **kwargs).SerializeToString()``."""
    return to_onnx(est, **kwargs).SerializeToString()
