"""Bag-of-tricks review classifier: Embedding + bidirectional GRU in Keras."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers

keras.utils.set_random_seed(20)
VOCAB, SEQ = 200, 30
POSITIVE, NEGATIVE = np.arange(2, 12), np.arange(12, 22)


def reviews(n, rng):
    x = rng.integers(22, VOCAB, size=(n, SEQ))
    y = rng.integers(0, 2, size=n)
    for i in range(n):
        idx = rng.choice(SEQ, size=3, replace=False)
        x[i, idx] = rng.choice(POSITIVE if y[i] else NEGATIVE, size=3)
    return x, y


rng = np.random.default_rng(20)
x_train, y_train = reviews(3000, rng)
x_val, y_val = reviews(600, rng)

model = keras.Sequential([
    keras.Input(shape=(SEQ,), dtype="int32"),
    layers.Embedding(VOCAB, 32),
    layers.Bidirectional(layers.GRU(24)),
    layers.Dense(16, activation="relu"),
    layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-6),
              loss="binary_crossentropy", metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=32, epochs=6, validation_data=(x_val, y_val), verbose=2)
loss, acc = model.evaluate(x_val, y_val, verbose=0)
print(f"final val_loss={loss:.4f} val_acc={acc:.4f}")
