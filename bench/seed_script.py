"""The seed article's plain Keras script, as a user would write it (side A of seed_vs_framework.py).

    python bench/seed_script.py --data mnist.npz [--epochs 5] [--json result.json]

Only the file it reads from and the timing printed at the end are added: the model, optimizer,
loss, default batch size (32), default verbosity and `validation_data=(x_test, y_test)` are the
article's. It deliberately does not import tfx_hydra.
"""

import argparse
import json
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True, help="an .npz with x_train, y_train, x_test, y_test")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--json", help="write fit seconds and final validation accuracy here")
args = parser.parse_args()

with np.load(args.data) as mnist:
    (x_train, y_train), (x_test, y_test) = (mnist["x_train"], mnist["y_train"]), (mnist["x_test"], mnist["y_test"])
x_train, x_test = x_train / 255.0, x_test / 255.0

model = tf.keras.models.Sequential([
    tf.keras.layers.Flatten(input_shape=(28, 28)),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dropout(0.2),
    tf.keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

started = time.perf_counter()
history = model.fit(x_train, y_train, epochs=args.epochs, validation_data=(x_test, y_test))
fit_seconds = time.perf_counter() - started
model.evaluate(x_test, y_test, verbose=2)

if args.json:
    with open(args.json, "w", encoding="utf-8") as out:
        json.dump({"fit_seconds": fit_seconds, "num_train": len(x_train), "epochs": args.epochs,
                   "val_accuracy": history.history["val_accuracy"][-1]}, out)
