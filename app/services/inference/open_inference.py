"""The Open Inference Protocol (KServe / Triton "V2" REST): tensors in, tensors out.

A model is named ``name``, ``name@<version>``, ``name@<alias>`` or ``name@latest`` (the
path's ``/versions/{v}`` is ``name@v``). Its inputs are one ``X`` tensor ``[rows,
features]`` (FP16/32/64, INT8-64, UINT8-64), or, for a model trained on named columns, one
``[rows]`` tensor per feature named by it; its outputs are the ONNX export's
(``solver.io.export``): ``label`` (INT64, FP64 or BYTES as the classes are), ``decision_function``
(``[rows]`` for two classes, else ``[rows, classes]``) and, for a model trained with
``probability=true``, ``probabilities``. Tensor data comes as JSON (flat or nested,
row-major) or in the binary tensor extension that ``tritonclient`` uses by default (a JSON
header of ``Inference-Header-Content-Length`` bytes, then each tensor's raw little-endian
bytes). Decoding here, evaluation in ``app.services.inference.serving`` (the same path as
``/predict``); errors are ``{"error": "..."}`` (``error_response``).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from starlette.responses import Response

from app.core.problems import ProblemError
from app.services.inference.cache import ModelEntry
from app.services.inference.instances import check_rows

HEADER_LENGTH = "inference-header-content-length"
INPUT = "X"
OUTPUTS = ("label", "decision_function", "probabilities")
DTYPES: dict[str, np.dtype] = {name: np.dtype(t).newbyteorder("<") for name, t in (
    ("FP16", np.float16), ("FP32", np.float32), ("FP64", np.float64),
    ("INT8", np.int8), ("INT16", np.int16), ("INT32", np.int32), ("INT64", np.int64),
    ("UINT8", np.uint8), ("UINT16", np.uint16), ("UINT32", np.uint32),
    ("UINT64", np.uint64))}
EXTENSIONS = ["binary_tensor_data"]


def bad_request(detail: str) -> ProblemError:
    """A request the protocol does not allow (400)."""
    return ProblemError(400, "Bad inference request", detail=detail,
                        type="invalid-inference-request")


def bad_data(detail: str) -> ProblemError:
    """Well-formed tensors the model cannot take (422, as ``/predict``'s bad instances)."""
    return ProblemError(422, "Invalid instances", detail=detail, type="invalid-instances")


def error_response(problem: ProblemError) -> Response:
    """A problem in the protocol's error shape, ``{"error": "..."}``, with its status and
    headers (``Retry-After``, ``WWW-Authenticate``)."""
    return Response(orjson.dumps({"error": problem.detail or problem.title}),
                    status_code=problem.status, media_type="application/json",
                    headers=problem.headers or None)


def model_ref(name: str, version: str | None = None) -> str:
    """The ``/predict``-style reference of a path's model name and optional version."""
    if version is None:
        return name
    if "@" in name:
        raise bad_request(f"model {name!r} names a version or alias already; drop "
                          f"/versions/{version} or the '@' part")
    return f"{name}@{version}"


@dataclass(frozen=True)
class Tensor:
    name: str
    values: np.ndarray  # shaped as the request says


@dataclass(frozen=True)
class InferRequest:
    """A decoded inference request."""

    id: str | None
    inputs: list[Tensor]
    outputs: list[tuple[str, bool]] | None  # (name, binary); None: all, binary_output
    binary_output: bool


def _dict(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if type(value) is not dict:
        raise bad_request(f"{where} must be an object")
    return value


def _flag(params: dict[str, Any], key: str, where: str) -> bool:
    value = params.get(key, False)
    if value is not True and value is not False:
        raise bad_request(f"{where}.parameters.{key} must be true or false")
    return value


def _shape(value: Any, where: object) -> tuple[int, ...]:
    if type(value) is list and 1 <= len(value) <= 2:
        shape = tuple(value)
        if all(type(d) is int and d >= 0 for d in shape):
            return shape
    raise bad_request(f"{where}.shape must be [rows, features] or [rows] of non-negative "
                      f"integers, not {value!r}"[:300])


def _has_bool(data: Any) -> bool:
    """A ``true``/``false`` anywhere in nested lists (numpy would read it as 1.0 / 0.0)."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            return True
        if isinstance(item, list):
            stack.extend(item)
    return False


def _json_values(data: Any, shape: tuple[int, ...], where: object, check_bools: bool
                 ) -> np.ndarray:
    if type(data) is not list:
        raise bad_request(f"{where}.data must be an array")
    try:
        arr = np.array(data, dtype=np.float64)
    except (ValueError, TypeError):
        raise bad_data(f"{where}.data holds a value that is not a number (or rows of "
                       "different lengths)") from None
    if check_bools and _has_bool(data):
        raise bad_data(f"{where}.data holds true/false; features must be numbers")
    if arr.size != math.prod(shape):
        raise bad_request(f"{where}: shape {list(shape)} has {math.prod(shape)} elements, "
                          f"data has {arr.size}")
    return arr.reshape(shape)


def _binary_values(raw: memoryview, offset: int, size: Any, datatype: str,
                   shape: tuple[int, ...], where: object) -> np.ndarray:
    if type(size) is not int or size < 0:
        raise bad_request(f"{where}.parameters.binary_data_size must be a byte count")
    if offset + size > len(raw):
        raise bad_request(f"{where}: binary_data_size {size} runs past the body's end")
    dtype = DTYPES[datatype]
    if size != math.prod(shape) * dtype.itemsize:
        raise bad_request(f"{where}: shape {list(shape)} of {datatype} is "
                          f"{math.prod(shape) * dtype.itemsize} bytes, binary_data_size "
                          f"says {size}")
    return np.frombuffer(raw[offset:offset + size], dtype=dtype).reshape(shape)


class _Where:
    """An input's name for messages, made only when one is needed."""

    __slots__ = ("k", "name")

    def __init__(self, k: int, name: Any) -> None:
        self.k, self.name = k, name

    def __format__(self, spec: str) -> str:
        return f"input {self.name!r}" if isinstance(self.name, str) and self.name else \
            f"inputs[{self.k}]"


def _tensor(k: int, item: Any, raw: memoryview, offset: int, binary_ok: bool,
            check_bools: bool) -> tuple[Tensor, int]:
    """One input tensor and the binary bytes it took."""
    if type(item) is not dict:
        raise bad_request(f"inputs[{k}] must be an object")
    name, datatype = item.get("name"), item.get("datatype")
    where = _Where(k, name)
    if type(name) is not str or not name:
        raise bad_request(f"inputs[{k}].name must be a non-empty string")
    if datatype not in DTYPES:
        raise bad_data(f"{where}: datatype {datatype!r}; features are numbers: one of "
                       f"{', '.join(DTYPES)}"[:300])
    shape = _shape(item.get("shape"), where)
    tparams = item.get("parameters")
    if tparams is not None and type(tparams) is not dict:
        raise bad_request(f"{where}.parameters must be an object")
    if tparams and "binary_data_size" in tparams:
        if not binary_ok:
            raise bad_request(f"{where} has binary_data_size but the request has no "
                              "Inference-Header-Content-Length header")
        size = tparams["binary_data_size"]
        return Tensor(name, _binary_values(raw, offset, size, datatype, shape, where)), size
    return Tensor(name, _json_values(item.get("data"), shape, where, check_bools)), 0


def _outputs(outputs: Any, binary_output: bool) -> list[tuple[str, bool]] | None:
    if outputs is None:
        return None
    if type(outputs) is not list:
        raise bad_request("outputs must be an array")
    wanted = []
    for k, item in enumerate(outputs):
        if type(item) is not dict or item.get("name") not in OUTPUTS:
            raise bad_request(f"outputs[{k}]: the outputs are {', '.join(OUTPUTS)}")
        if any(name == item["name"] for name, _ in wanted):  # each answered once: a list of
            # the same name repeated must not multiply the answer's size
            raise bad_request(f"outputs[{k}]: {item['name']!r} is asked for twice")
        oparams = _dict(item.get("parameters"), f"outputs[{k}].parameters")
        wanted.append((item["name"],
                       _flag(oparams, "binary_data", f"outputs[{k}]") or binary_output))
    return wanted


def parse_request(body: bytes, header_length: str | None) -> InferRequest:
    """Decode a request body: JSON, or a JSON header then binary tensors."""
    if header_length is None:
        head, raw = body, memoryview(b"")
    else:
        if not (header_length.isascii() and header_length.isdigit()) \
                or int(header_length) > len(body):
            raise bad_request(f"Inference-Header-Content-Length {header_length[:40]!r} is not "
                              f"a length within the body's {len(body)} bytes")
        n = int(header_length)
        head, raw = body[:n], memoryview(body)[n:]
    try:
        doc = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"the request is not JSON: {exc}") from None
    if type(doc) is not dict:
        raise bad_request("the request must be a JSON object")
    rid = doc.get("id")
    if rid is not None and type(rid) is not str:
        raise bad_request("id must be a string")
    params = doc.get("parameters")
    binary_output = params is not None and _flag(_dict(params, "parameters"),
                                                 "binary_data_output", "request")
    inputs = doc.get("inputs")
    if type(inputs) is not list or not inputs:
        raise bad_request("inputs must be a non-empty array of tensors")
    check_bools = b"true" in head or b"false" in head
    tensors: list[Tensor] = []
    offset = 0
    for k, item in enumerate(inputs):
        tensor, size = _tensor(k, item, raw, offset, header_length is not None, check_bools)
        tensors.append(tensor)
        offset += size
    if offset != len(raw):
        raise bad_request(f"{len(raw) - offset} bytes after the JSON header belong to no "
                          "input (binary_data_size)")
    return InferRequest(rid, tensors, _outputs(doc.get("outputs"), binary_output),
                        binary_output)


def to_matrix(req: InferRequest, model: ModelEntry) -> np.ndarray:
    """The rows of a request as one float64 matrix in the model's feature order."""
    n_features, names = model.n_features, model.feature_names
    first = req.inputs[0]
    if len(req.inputs) == 1 and first.values.ndim == 2:
        if first.values.shape[1] != n_features:
            raise bad_data(f"input {first.name!r} has {first.values.shape[1]} features per "
                           f"row; the model expects {n_features}")
        X = np.ascontiguousarray(first.values, dtype=np.float64)
    elif names and all(t.values.ndim == 1 or t.values.shape[1] == 1 for t in req.inputs):
        X = _columns(req.inputs, names)
    else:
        named = f", or one [rows] tensor per feature ({', '.join(names[:20])})" if names else ""
        raise bad_request(f"expected one input {INPUT!r} of shape [rows, {n_features}]"
                          f"{named}")
    if X.shape[0] == 0:
        raise bad_data("the inputs have no rows")
    check_rows(X.shape[0])
    finite = np.isfinite(X)
    if not finite.all():
        i, j = (int(v) for v in np.argwhere(~finite)[0])
        column = names[j] if names else str(j)
        raise bad_data(f"row {i}, feature {column}: {float(X[i, j])!r} is not finite")
    return X


def _columns(inputs: list[Tensor], names: tuple[str, ...]) -> np.ndarray:
    by_name: dict[str, np.ndarray] = {}
    for t in inputs:
        if t.name in by_name:
            raise bad_request(f"input {t.name!r} is given twice")
        by_name[t.name] = t.values.reshape(-1)
    unknown = [k for k in by_name if k not in names]
    missing = [n for n in names if n not in by_name]
    if unknown or missing:
        parts = ([f"unknown feature(s) {unknown[:20]}"] if unknown else []) + \
                ([f"missing feature(s) {missing[:20]}"] if missing else [])
        raise bad_data(f"{'; '.join(parts)}; the model's features are {list(names[:50])}")
    rows = {len(v) for v in by_name.values()}
    if len(rows) != 1:
        raise bad_request(f"the feature tensors have different lengths: {sorted(rows)[:10]}")
    return np.column_stack([by_name[n] for n in names]).astype(np.float64)


def label_datatype(classes: list[Any]) -> str:
    """INT64 for integer labels, FP64 for other numbers, BYTES for strings."""
    kinds = {type(c) for c in classes}
    if kinds <= {int}:
        return "INT64"
    if kinds <= {int, float}:
        return "FP64"
    return "BYTES"


def _bytes_tensor(values: list[Any]) -> bytes:
    parts = []
    for v in values:
        b = str(v).encode()
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def _binary(datatype: str, values: Any) -> bytes:
    if datatype == "BYTES":
        return _bytes_tensor(values)
    return np.asarray(values, dtype=DTYPES[datatype]).tobytes()


def _entry(name: str, datatype: str, values: Any, binary: bool, chunks: list[bytes]
           ) -> dict[str, Any]:
    if isinstance(values, list):
        entry = {"name": name, "datatype": datatype, "shape": [len(values)]}
    else:
        entry = {"name": name, "datatype": datatype, "shape": list(values.shape)}
    if binary:
        data = _binary(datatype, values)
        entry["parameters"] = {"binary_data_size": len(data)}
        chunks.append(data)
    else:
        entry["data"] = values if isinstance(values, list) else values.ravel()
    return entry


def response(req: InferRequest, model: ModelEntry, out: dict[str, Any]) -> Response:
    """The inference response: JSON, or a JSON header then the binary outputs asked for."""
    probabilities = out["probabilities"]
    wanted = req.outputs
    if wanted is None:
        wanted = [("label", req.binary_output), ("decision_function", req.binary_output)]
        if probabilities is not None:
            wanted.append(("probabilities", req.binary_output))
    outputs: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for name, binary in wanted:
        if name == "label":
            datatype, labels = label_datatype(out["classes"]), out["labels"]
            outputs.append(_entry(name, datatype, labels if datatype != "BYTES" else
                                  [str(v) for v in labels], binary, chunks))
            continue
        values = out["decision_values"] if name == "decision_function" else probabilities
        if values is None:
            raise bad_request(f"model {model.name} version {model.version} has no {name} "
                              "(train it with probability=true)")
        outputs.append(_entry(name, "FP64", values, binary, chunks))
    doc: dict[str, Any] = {"model_name": model.name, "model_version": str(model.version),
                           "outputs": outputs}
    if req.id is not None:
        doc["id"] = req.id
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return Response(head, media_type="application/json")
    return Response(head + b"".join(chunks), media_type="application/octet-stream",
                    headers={"Inference-Header-Content-Length": str(len(head))})


def decompress(body: bytes, encoding: str) -> bytes:
    """A gzip or deflate request body (tritonclient's ``request_compression_algorithm``),
    expanded to at most ``SODM_MAX_PREDICT_BODY_BYTES``."""
    from app.core.config import get_settings

    kind = encoding.strip().lower()
    if kind not in ("gzip", "deflate"):
        raise ProblemError(415, "Unsupported content encoding",
                           detail=f"Content-Encoding {encoding[:40]!r}; gzip or deflate",
                           type="unsupported-media-type")
    limit = get_settings().max_predict_body_bytes
    inflater = zlib.decompressobj(wbits=31 if kind == "gzip" else 15)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise bad_request(f"the {kind} body does not decompress: {exc}") from None
    if len(out) > limit:
        raise ProblemError(413, "Request body too large",
                           detail=f"the {kind} body expands past {limit} bytes "
                                  "(SODM_MAX_PREDICT_BODY_BYTES)", type="body-too-large",
                           limit_bytes=limit)
    return out


class InferDecoder:
    """The inference route's body format for ``app.services.inference.serving``; the model comes
    from the path (``model_ref``)."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def parse(self, body: bytes, headers: Mapping[str, str], query: Mapping[str, str]
              ) -> InferRequest:
        encoding = headers.get("content-encoding")
        if encoding:
            body = decompress(body, encoding)
        return parse_request(body, headers.get(HEADER_LENGTH))

    def reference(self, parsed: InferRequest) -> tuple[str | None, str | None]:
        return None, self.ref

    def matrix(self, parsed: InferRequest, model: ModelEntry, body: bytes) -> np.ndarray:
        return to_matrix(parsed, model)


def metadata(name: str, m: Any, versions: list[int]) -> dict[str, Any]:
    """The model metadata of a model row (``app.core.orm.Model``) and its name's versions."""
    classes = list(m.classes or [])
    names = list(m.feature_names) if m.feature_names else None
    inputs = [{"name": f, "datatype": "FP64", "shape": [-1]} for f in names] if names else \
        [{"name": INPUT, "datatype": "FP64", "shape": [-1, int(m.n_features)]}]
    outputs = [{"name": "label", "datatype": label_datatype(classes), "shape": [-1]},
               {"name": "decision_function", "datatype": "FP64",
                "shape": [-1] if len(classes) == 2 else [-1, len(classes)]}]
    if (m.params or {}).get("probability"):
        outputs.append({"name": "probabilities", "datatype": "FP64",
                        "shape": [-1, len(classes)]})
    return {"name": name, "versions": [str(v) for v in versions], "platform": "sodm",
            "inputs": inputs, "outputs": outputs,
            "parameters": {"model_id": m.id, "version": int(m.version), "classes": classes,
                           "feature_names": names, "algorithm": m.algorithm}}
