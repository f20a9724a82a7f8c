"""Portable, versioned model files for ODM / SODM estimators (no pickle).

A model file is a zip archive holding

* ``header.json``: format name and version, the formulation ("sodm-ijcai23") and its
  parameter convention, the estimator class and its parameters, the kernel with the resolved
  gamma, the scaler, the classes, the intercept option, the array manifest and the training
  metadata (algorithm, n_train, seconds, history);
* ``*.npy`` arrays, read back with ``np.load(..., allow_pickle=False)``: ``classes``,
  ``scaler_min`` / ``scaler_scale`` (when scaling), ``w`` (linear models) or the support
  vectors (``support_vectors`` dense, or ``sv_data`` / ``sv_indices`` / ``sv_indptr`` for CSR)
  and ``dual_coef`` (kernel models), plus ``support`` and ``n_support``; ``platt``
  (``[n_problems, 2]``, Platt's sigmoid) for models fitted with ``probability=True``.

Arrays are stored bit for bit and the loaded model predicts with the same code path, so the
decision values after a round trip are identical. The archive is deterministic (fixed entry
timestamps), so saving the same model twice gives the same bytes. Anything malformed, from a
different format or from an unknown version raises ``ValueError``.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np
import scipy.sparse as sp

from solver.core.training import jsonable
from solver.estimators import BASELINE_ESTIMATORS as _BASELINES
from solver.estimators import ODMClassifier, SODMClassifier, build_fitted

__all__ = ["FORMAT", "FORMAT_VERSION", "save_model", "load_model", "dumps", "loads"]

FORMAT = "sodm-model"
FORMAT_VERSION = 1
FORMULATION = "sodm-ijcai23"
CONVENTION = (
    "primal: min_w 1/2||w||^2 + lam/(2M) sum_i (xi_i^2 + upsilon*eps_i^2)/(1-theta)^2 "
    "s.t. 1-theta-xi_i <= y_i w.phi(x_i) <= 1+theta+eps_i (Wang et al., IJCAI-23); "
    "dual alpha_i=(zeta_i, beta_i) per instance, dual_coef_i = y_i (zeta_i - beta_i); "
    "f(x) = sum_i dual_coef_i k(z_i, x) or w.x on scaled features (x-min)*scale with a "
    "constant 1 appended when fit_intercept; y=+1 is classes[1] for two classes, "
    "one-vs-rest (row k = classes[k]) otherwise; libodm/ODM-journal lambda = lam/2, mu = upsilon"
)
_ESTIMATORS = {cls.__name__: cls for cls in (ODMClassifier, SODMClassifier,
                                             *_BASELINES.values())}
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)
_MAX_HEADER_BYTES = 64 * 2**20
_NPY_HEADER_SLACK = 1 << 16
_ALLOWED_KINDS = {"f", "i", "u", "U", "b"}

PathOrFile = str | os.PathLike | IO[bytes]


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def _classes_array(classes: np.ndarray) -> np.ndarray:
    c = np.asarray(classes)
    if c.dtype.kind == "O":
        if all(isinstance(v, str) for v in c):
            return c.astype(str)
        raise ValueError("only numeric, bool or string labels can be saved")
    if c.dtype.kind not in _ALLOWED_KINDS:
        raise ValueError(f"labels of dtype {c.dtype} cannot be saved")
    return c


def _json_params(est) -> dict[str, Any]:
    params = est.get_params(deep=False)
    rs = params.get("random_state")
    if rs is not None and not isinstance(rs, int | np.integer):
        params["random_state"] = None  # a RandomState object: the seed used is in training
    return jsonable(params)


def _model_arrays(est) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays: dict[str, np.ndarray] = {"classes": _classes_array(est.classes_),
                                     "support": est.support_, "n_support": est.n_support_}
    extra: dict[str, Any] = {}
    if getattr(est, "platt_", None) is not None:  # probability=True: Platt's (A, B) rows
        arrays["platt"] = est.platt_
    if est._scaler is not None:
        arrays["scaler_min"] = est._scaler.min_
        arrays["scaler_scale"] = est._scaler.scale_
    if est.w_ is not None:
        extra["model_type"] = "linear"
        extra["support_vectors_layout"] = None
        arrays["w"] = est.w_
    else:
        extra["model_type"] = "kernel"
        sv = est.support_vectors_
        arrays["dual_coef"] = est.dual_coef_
        if sp.issparse(sv):
            sv = sp.csr_matrix(sv)
            extra["support_vectors_layout"] = "csr"
            extra["support_vectors_shape"] = [int(sv.shape[0]), int(sv.shape[1])]
            arrays["sv_data"] = sv.data
            arrays["sv_indices"] = sv.indices
            arrays["sv_indptr"] = sv.indptr
        else:
            extra["support_vectors_layout"] = "dense"
            arrays["support_vectors"] = np.ascontiguousarray(sv)
    return arrays, extra


def dumps(est) -> bytes:
    """Serialize a fitted ``ODMClassifier`` / ``SODMClassifier`` (or baseline) to bytes."""
    name = type(est).__name__
    if name not in _ESTIMATORS or not hasattr(est, "classes_"):
        raise ValueError(f"save_model needs a fitted estimator of {sorted(_ESTIMATORS)}")
    arrays, extra = _model_arrays(est)
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "formulation": FORMULATION,
        "convention": CONVENTION,
        "estimator": name,
        "params": _json_params(est),
        "kernel": {"name": est.kernel, "gamma": float(est.gamma_), "degree": int(est.degree),
                   "coef0": float(est.coef0)},
        "fit_intercept": bool(est.fit_intercept),
        "intercept_feature": 1.0 if est.fit_intercept else None,
        "scaler": ({"kind": "minmax", "target_range": [0.0, 1.0],
                    "arrays": ["scaler_min", "scaler_scale"]}
                   if est._scaler is not None else None),
        "classes": jsonable(list(arrays["classes"].tolist())),
        "n_features_in": int(est.n_features_in_),
        **extra,
        "arrays": {k: {"dtype": np.asarray(v).dtype.str, "shape": list(np.shape(v))}
                   for k, v in arrays.items()},
        "training": jsonable({**est.fit_info_, "history": est.history_}),
    }
    text = json.dumps(header, indent=1, sort_keys=True, allow_nan=False)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("header.json", _FIXED_TIME), text.encode("utf-8"),
                    compress_type=zipfile.ZIP_DEFLATED)
        for key in sorted(arrays):
            zf.writestr(zipfile.ZipInfo(f"{key}.npy", _FIXED_TIME), _npy_bytes(arrays[key]),
                        compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def save_model(est, path_or_fileobj: PathOrFile) -> None:
    """Write a model file to a path (atomically, via a temporary file) or a binary file."""
    data = dumps(est)
    if isinstance(path_or_fileobj, str | os.PathLike):
        path = Path(path_or_fileobj)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    else:
        path_or_fileobj.write(data)


def _bad(msg: str) -> ValueError:
    return ValueError(f"not a valid {FORMAT} file: {msg}")


def _read_array(zf: zipfile.ZipFile, name: str, spec: dict) -> np.ndarray:
    try:
        info = zf.getinfo(f"{name}.npy")
    except KeyError:
        raise _bad(f"array {name!r} is missing") from None
    # Refuse to inflate more than the manifest announces (plus the .npy header).
    try:
        expected = int(np.prod(spec["shape"], dtype=np.int64)) * np.dtype(spec["dtype"]).itemsize
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(f"manifest entry of {name!r} is malformed ({exc})") from None
    if info.file_size > expected + _NPY_HEADER_SLACK:
        raise _bad(f"array {name!r} is larger than its manifest entry")
    raw = zf.read(info)
    try:
        a = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise _bad(f"array {name!r} is unreadable ({exc})") from None
    if not isinstance(a, np.ndarray) or a.dtype.kind not in _ALLOWED_KINDS:
        raise _bad(f"array {name!r} has an unsupported dtype")
    if list(a.shape) != list(spec["shape"]) or a.dtype.str != spec["dtype"]:
        raise _bad(f"array {name!r} does not match its manifest entry")
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        raise _bad(f"array {name!r} holds NaN or inf")
    return a


def loads(data: bytes):
    """Rebuild a fitted estimator from model-file bytes (see ``load_model``)."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise _bad(f"not a zip archive ({exc})") from None
    with zf:
        try:
            info = zf.getinfo("header.json")
        except KeyError:
            raise _bad("header.json is missing") from None
        if info.file_size > _MAX_HEADER_BYTES:
            raise _bad("header.json is too large")
        try:
            header = json.loads(zf.read(info).decode("utf-8"))
        except (ValueError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
            raise _bad(f"header.json is not JSON ({exc})") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise _bad(f"format is {header.get('format') if isinstance(header, dict) else None!r}"
                       f", expected {FORMAT!r}")
        version = header.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"unsupported {FORMAT} format_version {version!r}; this library "
                             f"reads version {FORMAT_VERSION}")
        if header.get("formulation") != FORMULATION:
            raise _bad(f"unknown formulation {header.get('formulation')!r}")
        try:
            return _build(zf, header)
        except KeyError as exc:
            raise _bad(f"header field {exc} is missing") from None
        except (TypeError, AttributeError) as exc:
            raise _bad(f"malformed header ({exc})") from None


def _build(zf: zipfile.ZipFile, header: dict):
    cls = _ESTIMATORS.get(header["estimator"])
    if cls is None:
        raise _bad(f"unknown estimator {header['estimator']!r}")
    manifest = header["arrays"]
    if not isinstance(manifest, dict):
        raise _bad("arrays manifest is not an object")

    def arr(name: str) -> np.ndarray:
        spec = manifest.get(name)
        if not isinstance(spec, dict):
            raise _bad(f"array {name!r} is not in the manifest")
        return _read_array(zf, name, spec)

    params = header["params"]
    if not isinstance(params, dict):
        raise _bad("params is not an object")
    est = cls()
    unknown = set(params) - set(est.get_params(deep=False))
    if unknown:
        raise _bad(f"unknown estimator parameters {sorted(unknown)}")
    est.set_params(**params)
    try:
        est.validate_params()
    except ValueError as exc:
        raise _bad(str(exc)) from None
    if bool(header["fit_intercept"]) != bool(est.fit_intercept):
        raise _bad("fit_intercept disagrees with params")
    kernel = header["kernel"]
    if kernel["name"] != est.kernel:
        raise _bad("kernel disagrees with params")
    gamma = float(kernel["gamma"])
    kwargs: dict[str, Any] = {}
    if header["scaler"] is not None:
        kwargs["scaler_min"] = arr("scaler_min")
        kwargs["scaler_scale"] = arr("scaler_scale")
    model_type = header["model_type"]
    if model_type == "linear":
        kwargs["w"] = arr("w")
    elif model_type == "kernel":
        layout = header["support_vectors_layout"]
        if layout == "dense":
            kwargs["support_vectors"] = arr("support_vectors")
        elif layout == "csr":
            shape = tuple(int(v) for v in header["support_vectors_shape"])
            indptr = arr("sv_indptr")
            indices = arr("sv_indices")
            data = arr("sv_data")
            try:
                sv = sp.csr_matrix((data, indices, indptr), shape=shape)
                sv.check_format(full_check=True)
            except ValueError as exc:
                raise _bad(f"support vectors are not valid CSR ({exc})") from None
            kwargs["support_vectors"] = sv
        else:
            raise _bad(f"unknown support_vectors_layout {layout!r}")
        kwargs["dual_coef"] = arr("dual_coef")
    else:
        raise _bad(f"unknown model_type {model_type!r}")
    if "platt" in manifest:
        kwargs["platt"] = arr("platt")
    training = dict(header.get("training") or {})
    history = training.pop("history", [])
    try:
        return build_fitted(est, classes=arr("classes"), n_features_in=int(header["n_features_in"]),
                            gamma=gamma, support=arr("support"), n_support=arr("n_support"),
                            history=history, fit_info=training, **kwargs)
    except ValueError as exc:
        raise _bad(str(exc)) from None


def load_model(path_or_fileobj: PathOrFile):
    """Load a model file written by ``save_model`` and return the fitted estimator."""
    if isinstance(path_or_fileobj, str | os.PathLike):
        data = Path(path_or_fileobj).read_bytes()
    else:
        data = path_or_fileobj.read()
    return loads(data)
