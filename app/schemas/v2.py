"""Bodies of the Open Inference Protocol (KServe / Triton "V2") REST routes, for the OpenAPI
document and typed clients. Requests are decoded by ``app.services.inference.open_inference`` (JSON
or the binary tensor extension), not by pydantic, so these models document the shapes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Datatype = Literal["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                   "INT64", "FP16", "FP32", "FP64", "BYTES"]


class InferenceError(BaseModel):
    """Every error of a ``/v2`` route (the protocol's shape, not problem+json)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"error": "no model 'churn@champion' (no alias 'champion' of model 'churn')"}]})

    error: str


class ServerMetadata(BaseModel):
    name: str = Field(examples=["sodm"])
    version: str = Field(examples=["0.1.0"])
    extensions: list[str] = Field(examples=[["binary_tensor_data"]])


class ServerLive(BaseModel):
    live: bool


class ServerReady(BaseModel):
    ready: bool


class ModelReady(BaseModel):
    name: str
    ready: bool


class MetadataTensor(BaseModel):
    name: str
    datatype: Datatype
    shape: list[int] = Field(description="-1: any size (the rows)")


class ModelMetadata(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "churn", "versions": ["1", "2", "3"], "platform": "sodm",
         "inputs": [{"name": "X", "datatype": "FP64", "shape": [-1, 4]}],
         "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]},
                     {"name": "decision_function", "datatype": "FP64", "shape": [-1]},
                     {"name": "probabilities", "datatype": "FP64", "shape": [-1, 2]}],
         "parameters": {"model_id": "9b1d2c3e-4f5a-4b6c-8d7e-0f1a2b3c4d5e", "version": 3,
                        "classes": [0, 1], "feature_names": None}}]})

    name: str
    versions: list[str] = Field(description="the live versions of the name")
    platform: str
    inputs: list[MetadataTensor]
    outputs: list[MetadataTensor]
    parameters: dict[str, Any] = Field(default_factory=dict)


class RequestInput(BaseModel):
    name: str = Field(description='"X" for one [rows, features] tensor, or, for a model '
                      "with feature_names, one [rows] tensor per feature named by it")
    shape: list[int]
    datatype: Datatype = Field(description="FP16/32/64, INT8-64 or UINT8-64")
    parameters: dict[str, Any] | None = Field(
        default=None, description='{"binary_data_size": n}: the tensor is n bytes after the '
        "JSON header (binary tensor extension)")
    data: list[Any] | None = Field(default=None, description="row-major, flat or nested")


class RequestOutput(BaseModel):
    name: Literal["label", "decision_function", "probabilities"]
    parameters: dict[str, Any] | None = Field(
        default=None, description='{"binary_data": true}: raw bytes after the JSON header')


class InferenceRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"id": "42", "inputs": [{"name": "X", "shape": [2, 4], "datatype": "FP64",
                                 "data": [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]]}],
         "outputs": [{"name": "label"}, {"name": "decision_function"}]}]})

    id: str | None = None
    parameters: dict[str, Any] | None = Field(
        default=None, description='{"binary_data_output": true}: every output as raw bytes')
    inputs: list[RequestInput]
    outputs: list[RequestOutput] | None = Field(default=None, description="default: all")


class ResponseOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class InferenceResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=(), json_schema_extra={"examples": [
        {"model_name": "churn", "model_version": "3", "id": "42",
         "outputs": [{"name": "label", "shape": [2], "datatype": "INT64", "data": [1, 0]},
                     {"name": "decision_function", "shape": [2], "datatype": "FP64",
                      "data": [0.84, -1.12]}]}]})

    model_name: str
    model_version: str
    id: str | None = None
    parameters: dict[str, Any] | None = None
    outputs: list[ResponseOutput]
