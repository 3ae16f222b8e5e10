"""TensorFlow Serving's requests for an exported SavedModel: built as a client sends them, checked against the
signature before they leave, and answered the way the server binds them.

    signature_of(dir)          the signature's inputs and outputs (names, dtypes, shapes), from the SavedModel
    rest_body(sig, examples)   TF Serving's REST body: row (`instances`) or columnar (`inputs`), with
                               `signature_name`
    predict_request(sig, ...)  a gRPC `PredictRequest` (tensorflow-serving-api), by version or version label
    answer_rest(dir, body)     what the server answers to a REST body: `predictions` (row) or `outputs`
                               (columnar), or TF Serving's `{"error": ...}` for a request it refuses
    answer_grpc(dir, request)  what it answers to a PredictRequest: a `PredictResponse`

The server binds inputs by name and checks each tensor's dtype and shape against the signature; so do these
helpers, and a mismatch is one `RequestError` naming the input, what the signature takes and what the request
gives, never a TensorFlow stack dump. The examples are the data's raw values (the signature scales them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfx_hydra.errors import RequestError
from tfx_hydra.export.served import load_saved_model
from tfx_hydra.export.warmup import SIGNATURE


@dataclass(frozen=True)
class TensorSpec:
    dtype: str  # numpy's name: float32, int64, string
    shape: tuple[int | None, ...]  # None: any size (the batch)

    def shown(self) -> str:
        return f"{self.dtype} of shape [{', '.join('None' if d is None else str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class Signature:
    name: str
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]


def signature_of(saved_model_dir: str, name: str = SIGNATURE) -> Signature:
    """A signature as saved_model_cli shows it, read from the SavedModel's graph (nothing loaded or run)."""
    import tensorflow as tf
    from tensorflow.python.tools import saved_model_utils

    signatures = saved_model_utils.get_meta_graph_def(saved_model_dir, "serve").signature_def
    if name not in signatures:
        served = sorted(key for key in signatures if not key.startswith("__"))  # not the init op's
        raise RequestError(f"the SavedModel at {saved_model_dir} has no signature {name!r}; it has "
                           f"{', '.join(served)}.", fix=f"signature_name={served[0]}" if served else None)

    def specs(tensors) -> dict[str, TensorSpec]:
        return {key: TensorSpec("string" if info.dtype == tf.string.as_datatype_enum
                                else tf.dtypes.as_dtype(info.dtype).name,
                                tuple(None if d.size < 0 else d.size for d in info.tensor_shape.dim))
                for key, info in tensors.items()}
    return Signature(name, specs(signatures[name].inputs), specs(signatures[name].outputs))


def require_fits(signature: Signature, name: str, value) -> Any:
    """`value` as the array the server would bind to input `name`, or a RequestError saying what is wrong."""
    import numpy as np

    if name not in signature.inputs:
        raise RequestError(f"signature {signature.name!r} has no input {name!r}; its inputs are "
                           f"{', '.join(sorted(signature.inputs))}.")
    spec = signature.inputs[name]
    try:
        array = np.asarray(value, dtype=object if spec.dtype == "string" else spec.dtype)
    except (TypeError, ValueError) as err:
        raise RequestError(f"input {name!r} takes {spec.shown()}; the request's values are not {spec.dtype} "
                           f"({err}).") from None
    if spec.dtype == "string":  # UTF-8 bytes, as TF Serving's JSON parser makes them
        if not all(isinstance(v, (str, bytes)) for v in array.flat):
            raise RequestError(f"input {name!r} takes {spec.shown()}; the request gives values that are not text.")
        array = np.array([v.encode() if isinstance(v, str) else v for v in array.flat], dtype=object) \
            .reshape(array.shape)
    if len(array.shape) != len(spec.shape) or any(want is not None and got != want
                                                  for got, want in zip(array.shape, spec.shape)):
        raise RequestError(f"input {name!r} takes {spec.shown()}; the request gives shape "
                           f"[{', '.join(str(d) for d in array.shape)}].",
                           fix="send a batch: a list of examples, each of the shape after the first None")
    return array


def _batch(signature: Signature, examples) -> dict[str, Any]:
    """The examples bound to the signature's one input (a dict of them for a signature of several)."""
    named = examples if isinstance(examples, dict) else {_only_input(signature): examples}
    bound = {name: require_fits(signature, name, value) for name, value in named.items()}
    missing = sorted(set(signature.inputs) - set(named))
    if missing:
        raise RequestError(f"signature {signature.name!r} also takes {', '.join(missing)}; the request lacks it.")
    return bound


def _only_input(signature: Signature) -> str:
    if len(signature.inputs) != 1:
        raise RequestError(f"signature {signature.name!r} takes {', '.join(sorted(signature.inputs))}: name each.",
                           fix="pass the examples as {input name: values}")
    return next(iter(signature.inputs))


def _json_values(array) -> list:
    """An array as JSON takes it: text as str (TF Serving answers strings as JSON strings)."""
    def decoded(value):
        if isinstance(value, list):
            return [decoded(v) for v in value]
        return value.decode() if isinstance(value, bytes) else value
    return decoded(array.tolist())


def rest_body(signature: Signature, examples, columnar: bool = False) -> dict:
    """TF Serving's REST predict body for `examples` (a batch of raw values, or {input: batch}): row format,
    one entry per example under `instances`, or columnar, each input's whole batch under `inputs`."""
    batch = _batch(signature, examples)
    body: dict[str, Any] = {"signature_name": signature.name}
    if columnar:
        values = {name: _json_values(array) for name, array in batch.items()}
        body["inputs"] = values[_only_input(signature)] if len(values) == 1 else values
    elif len(batch) == 1:
        body["instances"] = _json_values(next(iter(batch.values())))
    else:
        size = len(next(iter(batch.values())))
        body["instances"] = [{name: _json_values(array[i:i + 1])[0] for name, array in batch.items()}
                             for i in range(size)]
    return body


def predict_request(signature: Signature, examples, model_name: str, version: int | None = None,
                    version_label: str | None = None):
    """A gRPC PredictRequest for `examples`, for a version, a version label, or (neither) the newest."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature.name
    if version is not None:
        request.model_spec.version.value = version
    elif version_label is not None:
        request.model_spec.version_label = version_label
    for name, array in _batch(signature, examples).items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(array))
    return request


def _run(saved_model_dir: str, signature: Signature, batch: dict[str, Any]) -> dict[str, Any]:
    import tensorflow as tf

    function = load_saved_model(saved_model_dir).signatures[signature.name]
    return {name: tensor.numpy() for name, tensor in function(**{k: tf.constant(v) for k, v in batch.items()}).items()}


def answer_rest(saved_model_dir: str, body: dict) -> dict:
    """The server's answer to a REST predict body: row requests get `predictions` (each example's outputs, or
    its one output's value), columnar ones `outputs`; a request it refuses gets `{"error": ...}`."""
    try:
        signature = signature_of(saved_model_dir, body.get("signature_name", SIGNATURE))
        if ("instances" in body) == ("inputs" in body):
            raise RequestError("a REST predict body has either `instances` (row format) or `inputs` (columnar).")
        if "inputs" in body:
            batch = _batch(signature, body["inputs"])
        elif body["instances"] and isinstance(body["instances"][0], dict):
            batch = _batch(signature, {name: [row[name] for row in body["instances"]] for name in body["instances"][0]})
        else:
            batch = _batch(signature, body["instances"])
    except RequestError as err:
        return {"error": err.message}
    outputs = {name: _json_values(value) for name, value in _run(saved_model_dir, signature, batch).items()}
    if "inputs" in body:
        return {"outputs": outputs if len(outputs) > 1 else next(iter(outputs.values()))}
    size = len(next(iter(outputs.values())))
    if len(outputs) == 1:
        return {"predictions": next(iter(outputs.values()))}
    return {"predictions": [{name: values[i] for name, values in outputs.items()} for i in range(size)]}


def answer_grpc(saved_model_dir: str, request):
    """The server's PredictResponse to a PredictRequest: each input bound by name (dtype and shape checked)."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    signature = signature_of(saved_model_dir, request.model_spec.signature_name or SIGNATURE)
    batch = _batch(signature, {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()})
    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(request.model_spec)
    for name, value in _run(saved_model_dir, signature, batch).items():
        if not request.output_filter or name in request.output_filter:
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
    return response
