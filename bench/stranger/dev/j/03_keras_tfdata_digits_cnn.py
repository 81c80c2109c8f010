"""Small CNN on the 8x8 digits with a tf.data input pipeline.

Images and labels are kept as two tensor datasets (the image side gets a
random-shift augmentation map) and zipped together before batching.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 3
EPOCHS = 20
BATCH_SIZE = 64
AUTOTUNE = tf.data.AUTOTUNE
tf.keras.utils.set_random_seed(SEED)

digits = load_digits()
images = (digits.images[..., np.newaxis] / 16.0).astype("float32")  # (N, 8, 8, 1)
labels = digits.target.astype("int32")
x_train, x_val, y_train, y_val = train_test_split(
    images, labels, test_size=0.2, stratify=labels, random_state=SEED
)


def random_shift(image):
    """Pad by one pixel and crop back to 8x8: a shift of at most one pixel."""
    image = tf.image.pad_to_bounding_box(image, 1, 1, 10, 10)
    return tf.image.random_crop(image, size=(8, 8, 1), seed=SEED)


image_ds = (
    tf.data.Dataset.from_tensor_slices(x_train)
    .shuffle(len(x_train), seed=SEED, reshuffle_each_iteration=True)
    .map(random_shift)
)
label_ds = tf.data.Dataset.from_tensor_slices(y_train)
train_ds = tf.data.Dataset.zip((image_ds, label_ds)).batch(BATCH_SIZE).prefetch(AUTOTUNE)
val_ds = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(256).prefetch(AUTOTUNE)

model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(2),
        tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10),
    ],
    name="digits_cnn",
)
model.compile(
    optimizer=tf.keras.optimizers.Adam(learning_rate=2e-3),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)

history = model.fit(train_ds, validation_data=val_ds, epochs=EPOCHS, verbose=0)
for epoch in range(EPOCHS):
    h = {k: v[epoch] for k, v in history.history.items()}
    print(
        f"epoch {epoch + 1:02d} loss {h['loss']:.4f} acc {h['accuracy']:.4f} "
        f"val_loss {h['val_loss']:.4f} val_acc {h['val_accuracy']:.4f}"
    )

val_loss, val_acc = model.evaluate(val_ds, verbose=0)
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
