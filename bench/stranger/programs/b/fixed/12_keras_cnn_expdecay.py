"""Small CNN for the 8x8 digits; SGD with momentum and an exponentially decaying learning
rate (decay by 0.9 every epoch)."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(12)

d = load_digits()
x = (d.images[..., np.newaxis] / 16.0).astype("float32")
x_train, x_val, y_train, y_val = train_test_split(x, d.target, test_size=0.2, random_state=12)

EPOCHS, BATCH = 15, 32
lr_schedule = keras.optimizers.schedules.ExponentialDecay(
    initial_learning_rate=0.02, decay_steps=int(np.ceil(len(x_train) / BATCH)), decay_rate=0.9)

model = keras.Sequential([
    keras.Input(shape=(8, 8, 1)),
    layers.Conv2D(16, 3, activation="relu", padding="same"),
    layers.MaxPooling2D(),
    layers.Conv2D(32, 3, activation="relu", padding="same"),
    layers.Flatten(),
    layers.Dense(64, activation="relu"),
    layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr_schedule, momentum=0.9),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x_train, y_train, epochs=EPOCHS, batch_size=BATCH, validation_data=(x_val, y_val), verbose=2)
print(f"learning rate at the end: {float(model.optimizer.learning_rate):.2e}")
val_loss, val_acc = model.evaluate(x_val, y_val, verbose=0)
print(f"final val_loss={val_loss:.4f} val_acc={val_acc:.4f}")
