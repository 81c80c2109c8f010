import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(17)

X, y = make_classification(n_samples=5000, n_features=30, n_informative=15, n_classes=6,
                           n_clusters_per_class=2, class_sep=1.5, random_state=17)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=17)
scaler = StandardScaler()
X_train = scaler.fit_transform(X_train)
X_val = scaler.transform(X_val)

LEARNING_RATE = 3e-4

model = keras.Sequential([
    keras.layers.Input((30,)),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(128, activation="relu"),
    keras.layers.Dense(6),
])
model.compile(optimizer=keras.optimizers.Adam(learning_rate=LEARNING_RATE),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
h = model.fit(X_train, y_train, validation_data=(X_val, y_val), epochs=15, batch_size=64, verbose=2)
print(f"final train_loss {h.history['loss'][-1]:.4f} val_loss {h.history['val_loss'][-1]:.4f} val_accuracy {h.history['val_accuracy'][-1]:.4f}")
