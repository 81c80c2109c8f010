# Keras LSTM: sequences of tokens 0..9; label = 1 if token 7 appears more often than token 3.
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from keras import layers

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(2)
rng = np.random.default_rng(2)

SEQ_LEN, VOCAB = 20, 10


def make(n):
    x = rng.integers(0, VOCAB, size=(n, SEQ_LEN))
    diff = (x == 7).sum(1) - (x == 3).sum(1)
    keep = diff != 0  # drop ties
    return x[keep], (diff[keep] > 0).astype("float32")


x_train, y_train = make(4000)
x_val, y_val = make(800)
print("train size", len(x_train), "positive rate", y_train.mean().round(3))

model = keras.Sequential([
    keras.Input(shape=(SEQ_LEN,), dtype="int32"),
    layers.Embedding(VOCAB, 16),
    layers.LSTM(32),
    layers.Dense(16, activation="relu"),
    layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(3e-3, clipnorm=1.0), loss="binary_crossentropy",
              metrics=["accuracy", keras.metrics.AUC(name="auc")])
history = model.fit(x_train, y_train, validation_data=(x_val, y_val), batch_size=64, epochs=12,
                    shuffle=True, verbose=2)
print(f"final val_loss {history.history['val_loss'][-1]:.4f} val_accuracy {history.history['val_accuracy'][-1]:.4f} val_auc {history.history['val_auc'][-1]:.4f}")
