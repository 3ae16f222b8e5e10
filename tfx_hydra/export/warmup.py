"""Warm-up records: `<version>/assets.extra/tf_serving_warmup_requests`, which TensorFlow Serving replays
through a model version before it serves it, so no client's first request pays the graph's initialisation.

A TFRecord file of `PredictionLog`s (TF Serving's own protos, `tensorflow-serving-api`), each a
`PredictRequest` for `serving_default` with one real validation example as the data's raw values, as a
client sends them (the scaling is inside the signature). TF Serving reads at most 1000 of them.
"""

from __future__ import annotations

import os

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_WARMUP_REQUESTS = 1000  # TF Serving's own cap on the records it replays
SIGNATURE = "serving_default"


def write_warmup_requests(saved_model_dir: str, model_name: str, examples: list) -> str:
    """One PredictRequest per example (a batch of one) into the SavedModel's assets.extra."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    path = os.path.join(saved_model_dir, WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as records:
        for example in examples:
            request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name=model_name,
                                                                                signature_name=SIGNATURE))
            value = np.asarray(example)
            request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(value[None] if value.dtype.kind in "SUO"
                                                                   else value[None].astype("float32")))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            records.write(log.SerializeToString())
    return path


def read_warmup_requests(saved_model_dir: str) -> list:
    """The PredictRequests of a SavedModel's warm-up file, as TF Serving reads them."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(saved_model_dir, WARMUP_FILE)
    return [prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
            for record in tf.data.TFRecordDataset(path)]
