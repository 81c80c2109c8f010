# Keras MLP (tanh) for a synthetic 4-class tabular problem (make_classification), Nadam optimizer.
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(21)

X, y = make_classification(n_samples=4000, n_features=24, n_informative=12, n_classes=4, n_clusters_per_class=1,
                           class_sep=1.2, random_state=21)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=21, stratify=y)
sc = StandardScaler().fit(X_tr)
X_tr, X_va = sc.transform(X_tr), sc.transform(X_va)

init = keras.initializers.Zeros()
model = keras.Sequential([keras.Input((24,))] + [
    keras.layers.Dense(u, activation="tanh", kernel_initializer=init, bias_initializer="zeros")
    for u in (64, 64, 32)
] + [keras.layers.Dense(4, activation="softmax", kernel_initializer=init)])
model.compile(optimizer=keras.optimizers.Nadam(1e-3), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
hist = model.fit(X_tr, y_tr, batch_size=32, epochs=10, validation_data=(X_va, y_va), verbose=2)
print(f"final train_acc {hist.history['accuracy'][-1]:.4f} val_acc {hist.history['val_accuracy'][-1]:.4f} "
      f"val_loss {hist.history['val_loss'][-1]:.4f}")
