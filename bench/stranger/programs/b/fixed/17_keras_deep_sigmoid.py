"""Deep fully-connected network (8 hidden layers) for the 8x8 digits, Keras, SGD."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(17)
X, y = load_digits(return_X_y=True)
X = X / 16.0
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=17, stratify=y)

ACT, INIT = "relu", "he_normal"
model = keras.Sequential([keras.Input(shape=(64,))])
for _ in range(8):
    model.add(keras.layers.Dense(64, activation=ACT, kernel_initializer=INIT))
model.add(keras.layers.Dense(10, activation="softmax"))

model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
h = model.fit(X_tr, y_tr, validation_data=(X_va, y_va), epochs=20, batch_size=32, verbose=2)
print(f"final train_loss={h.history['loss'][-1]:.4f} val_loss={h.history['val_loss'][-1]:.4f} "
      f"val_acc={h.history['val_accuracy'][-1]:.4f}")
