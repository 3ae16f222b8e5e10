"""Our Keras layers, registered for saving and loading (import this module before keras.models.load_model).

HubLayer: a TF Hub model (a tfhub.dev/Kaggle handle or a SavedModel folder) as a Keras 3 layer.

`hub.KerasLayer` subclasses tf_keras' Layer, which Keras 3 refuses ("Only instances of
keras.Layer can be added to a Sequential model", tensorflow/hub#903, #920), and
`keras.layers.TFSMLayer` copies variable names that Keras' optimizers reject (':0'). This
layer loads the SavedModel with `hub.load` (which honours TFHUB_CACHE_DIR and downloads
URL handles) and wraps each restored variable in a Keras variable that *is* that variable
(Keras' TensorFlow backend keeps a tf.Variable initializer as its value): one set of
weights, seen by the restored functions and by Keras' optimizer, trainable flags kept
(batch-norm statistics stay non-trainable), `training` passed to models that take it.
Saving: the config holds the handle; loading re-runs hub.load and then Keras' weights.
"""

from __future__ import annotations

import importlib
import os

import keras

from tfx_hydra.errors import ConfigError


@keras.saving.register_keras_serializable(package="tfx_hydra")
class HubLayer(keras.layers.Layer):
    """`handle`: a URL or a SavedModel folder. `output_key`: which output of a model returning a
    dict (None: the only one; "*": the whole dict, e.g. a text preprocessing model's input_word_ids,
    input_mask and input_type_ids for its encoder). `signature`: call a named signature (TF1-style hub
    models) instead of the model's __call__. `trainable=False` freezes the hub weights. Inputs may be
    images, raw strings or a dict of tensors; floating inputs are given as float32. `key`: the config key that
    set the handle, which an error names (a text model's preprocessor is model.preprocess_handle)."""

    def __init__(self, handle: str, output_key: str | None = None, signature: str | None = None,
                 trainable: bool = False, key: str = "model.handle", **kwargs):
        super().__init__(trainable=trainable, **kwargs)
        self.handle, self.output_key, self.signature, self.key = handle, output_key, signature, key
        self._module = load_module(handle, key)
        if signature is not None and signature not in self._module.signatures:
            raise ConfigError(f"model.signature={signature}: {handle} has signatures {list(self._module.signatures)}.",
                              fix=f"model.signature={next(iter(self._module.signatures), 'null')} or null")
        self._call_fn = self._module.signatures[signature] if signature else self._module
        self._takes_training = signature is None and "training" in call_parameters(self._module)
        variables = getattr(self._module, "variables", None)  # the Reusable SavedModel API's list
        if variables is None and trainable:
            raise ConfigError(f"model.handle={handle} cannot be fine-tuned: the SavedModel does not list its "
                              "variables (TF Hub's Reusable SavedModel API: .variables, .trainable_variables).",
                              fix="model.freeze_backbone=true (use it as a fixed feature extractor)")
        for variable in variables or []:  # trainable and non-trainable alike
            self._track_variable(keras.Variable(variable, trainable=variable.trainable, dtype=variable.dtype,
                                                name=variable.name.split(":")[0].replace("/", "_")))
        self.built = True

    def call(self, inputs, training=None):
        import tensorflow as tf

        # hub models compute in float32 whatever the policy; strings and token ids pass as they are
        inputs = tf.nest.map_structure(lambda x: tf.cast(x, tf.float32) if x.dtype.is_floating else x, inputs)
        if self.signature:
            outputs = self._call_fn(inputs)
        elif self._takes_training:
            outputs = self._call_fn(inputs, training=bool(training) and self.trainable)
        else:
            outputs = self._call_fn(inputs)
        outputs = self._select(outputs)
        return tf.nest.map_structure(  # the policy's
            lambda x: tf.cast(x, self.compute_dtype) if x.dtype.is_floating else x, outputs)

    def _select(self, outputs):
        if not isinstance(outputs, dict) or self.output_key == "*":
            return outputs
        if self.output_key is None and len(outputs) == 1:
            return next(iter(outputs.values()))
        if self.output_key not in outputs:
            raise ConfigError(f"model.output_key={self.output_key}: {self.handle} returns {sorted(outputs)}.",
                              fix=f"model.output_key={sorted(outputs)[0]}")
        return outputs[self.output_key]

    def compute_output_spec(self, inputs, training=None):
        """Trace the restored function once on a symbolic batch: hub models declare no output shape."""
        import tensorflow as tf

        @tf.function(autograph=False)
        def probe(x):
            return self.call(x, training=False)

        specs = tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape, tf.float32 if "float" in str(x.dtype)
                                                              else tf.as_dtype(x.dtype)), inputs)
        traced = probe.get_concrete_function(specs).structured_outputs
        return tf.nest.map_structure(lambda t: keras.KerasTensor(
            tuple(t.shape), dtype=self.compute_dtype if t.dtype.is_floating else t.dtype.name), traced)

    def get_config(self):
        return {**super().get_config(), "handle": self.handle, "output_key": self.output_key,
                "signature": self.signature, "key": self.key}


def load_module(handle: str, key: str = "model.handle"):
    """hub.load, with the two ways it fails here said plainly, naming `key` (the config key of the handle)."""
    import tensorflow_hub as hub

    is_url = handle.startswith(("http://", "https://", "gs://"))
    if not is_url and not os.path.isdir(os.path.expanduser(handle)):
        raise ConfigError(f"{key}={handle} is neither a URL nor a SavedModel folder.",
                          fix=f"{key}=https://tfhub.dev/... or the folder holding saved_model.pb")
    try:
        return hub.load(os.path.expanduser(handle) if not is_url else handle)
    except Exception as err:  # network errors, 404s, a folder without saved_model.pb
        if "Op type not registered" in str(err):  # a BERT preprocessor: TensorFlow Text's ops
            raise ConfigError(f"{key}={handle} needs ops TensorFlow does not have by itself "
                              f"({str(err).splitlines()[0][:200]}).",
                              fix='pip install "tfx_hydra[text]" (TensorFlow Text, the version matching TensorFlow)'
                              ) from None
        cache = os.environ.get("TFHUB_CACHE_DIR")
        where = (f"TFHUB_CACHE_DIR={cache}" if cache
                 else "set TFHUB_CACHE_DIR to a folder: unset, TF Hub caches in a temporary folder")
        raise ConfigError(
            f"{key}={handle} could not be loaded ({type(err).__name__}: {str(err).splitlines()[0][:300]}).",
            fix=f"on a machine without internet, download the model elsewhere and point {key} at its "
            f"folder, or fill the TF Hub cache ({where}) and keep the URL",
        ) from None


def call_parameters(module) -> list[str]:
    """The parameter names of a restored model's __call__ ([] when it has none)."""
    function = getattr(module, "__call__", None)
    function_type = getattr(function, "function_type", None)
    return list(function_type.parameters) if function_type is not None else []


@keras.saving.register_keras_serializable(package="tfx_hydra")
class Preprocess(keras.layers.Layer):
    """keras.applications.<module>.preprocess_input of `architecture`, as a layer that saves and loads."""

    def __init__(self, architecture: str, **kwargs):
        super().__init__(**kwargs)
        self.architecture = architecture
        module = importlib.import_module(application(architecture).__module__)
        self._preprocess = module.preprocess_input

    def call(self, inputs):
        return self._preprocess(inputs)

    def get_config(self):
        return {**super().get_config(), "architecture": self.architecture}


def application(architecture: str):
    """The keras.applications constructor named `architecture`, or the error that lists them."""
    import keras

    constructor = getattr(keras.applications, architecture, None)
    if constructor is None or not callable(constructor):
        known = sorted(n for n in dir(keras.applications) if n[:1].isupper())
        raise ConfigError(f"model.architecture={architecture} is not in keras.applications.",
                          fix=f"one of {', '.join(known[:12])}, ... (keras.applications lists {len(known)})")
    return constructor


@keras.saving.register_keras_serializable(package="tfx_hydra")
class PresetPreprocessor(keras.layers.Layer):
    """A keras-hub preset's preprocessor (a tokenizer and packer, an image converter) as the first layer of a
    model, so the SavedModel, the .keras file and the MLflow model take raw strings or pixels: keras-hub's own
    export leaves it out. Keras cannot infer its output from a symbolic call when a saved model is rebuilt (the
    tokenizer's vocabulary is loaded after the graph, as an asset), so the output's shapes and types are probed
    once on a real example and kept in the config (`output_spec`). `preset`: what the model was built from (name,
    folder, digest, keras-hub's version, the tokenizer's size and sequence length), recorded with the run."""

    def __init__(self, preprocessor, output_spec=None, preset=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(preprocessor, dict):
            import keras_hub  # noqa: F401  registers keras-hub's classes for the preprocessor's config

            preprocessor = keras.saving.deserialize_keras_object(preprocessor)
        self.preprocessor = preprocessor
        self._output_spec = output_spec
        self._preset = dict(preset or {})
        self.built = True

    @property
    def preset(self) -> dict:
        return dict(self._preset)

    def probe(self, example) -> None:
        """Keep the preprocessor's output structure, from one real example (once, when the model is built)."""
        answered = self.preprocessor(example)
        self._output_spec = ({name: _shape_and_dtype(value) for name, value in answered.items()}
                             if isinstance(answered, dict) else _shape_and_dtype(answered))

    def call(self, inputs):
        return self.preprocessor(inputs)

    def compute_output_spec(self, inputs):
        spec = self._output_spec
        if isinstance(spec, dict):
            return {name: keras.KerasTensor((None, *shape), dtype=dtype) for name, (shape, dtype) in spec.items()}
        return keras.KerasTensor((None, *spec[0]), dtype=spec[1])

    def get_config(self):
        return {**super().get_config(), "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
                "output_spec": self._output_spec, "preset": self._preset}


def _shape_and_dtype(tensor) -> list:
    return [[None if d is None else int(d) for d in tensor.shape[1:]], tensor.dtype.name]


@keras.saving.register_keras_serializable(package="tfx_hydra")
class FirstToken(keras.layers.Layer):
    """A sequence's first position (`[CLS]`, a vision transformer's class token): what a classifier reads."""

    def call(self, inputs):
        return inputs[:, 0, :]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])
