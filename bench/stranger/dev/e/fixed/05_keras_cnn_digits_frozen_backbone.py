"""Conv backbone + classification head on digits, trained end to end (RMSprop)."""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

keras.utils.set_random_seed(5)

digits = load_digits()
X = (digits.images / 16.0).astype("float32")[..., None]
y = digits.target.astype("int32")
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.25, random_state=5, stratify=y)


def build_backbone():
    return keras.Sequential([
        keras.Input(shape=(8, 8, 1)),
        layers.Conv2D(16, 3, padding="same"),
        layers.BatchNormalization(),
        layers.Activation("relu"),
        layers.Conv2D(32, 3, padding="same"),
        layers.BatchNormalization(),
        layers.Activation("relu"),
        layers.GlobalAveragePooling2D(),
    ], name="backbone")


backbone = build_backbone()
# the backbone is built from scratch here (no pre-trained weights), so it must train with the head

inputs = keras.Input(shape=(8, 8, 1))
features = backbone(inputs)
x = layers.Dense(64, activation="relu")(features)
outputs = layers.Dense(10, activation="softmax")(x)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
print(f"trainable weights: {sum(int(np.prod(w.shape)) for w in model.trainable_weights)}")
history = model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=20, batch_size=32, verbose=2)

val_loss, val_acc = model.evaluate(X_val, y_val, verbose=0)
print(f"final train_loss {history.history['loss'][-1]:.4f}")
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
