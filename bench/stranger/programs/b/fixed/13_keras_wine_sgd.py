"""Wine cultivar classification: a small Keras network trained with SGD + momentum."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(1)

data = load_wine()
X, y = data.data.astype("float32"), data.target
X_tr, X_val, y_tr, y_val = train_test_split(X, y, test_size=0.3, stratify=y, random_state=1)
mean, std = X_tr.mean(0), X_tr.std(0)
X_tr, X_val = (X_tr - mean) / std, (X_val - mean) / std
print("feature ranges:", X_tr.min(0).round(2)[:4], "...", X_tr.max(0).round(1)[-4:])

inputs = keras.Input(shape=(X.shape[1],))
h = keras.layers.Dense(32, activation="relu")(inputs)
h = keras.layers.Dense(16, activation="relu")(h)
outputs = keras.layers.Dense(3, activation="softmax")(h)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
hist = model.fit(X_tr, y_tr, validation_data=(X_val, y_val), epochs=60, batch_size=16, verbose=2)
print(f"final train_loss={hist.history['loss'][-1]:.4f} val_loss={hist.history['val_loss'][-1]:.4f} "
      f"val_acc={hist.history['val_accuracy'][-1]:.4f}")
