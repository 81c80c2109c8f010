"""Diabetes progression regression with a subclassed tf.keras.Model.

The model owns its Normalization layer and a hand-written train_step (Huber
loss, gradient-norm clipping); batches come from a tf.data pipeline and the
learning rate follows a cosine decay schedule.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

SEED = 3
tf.keras.utils.set_random_seed(SEED)
tf.config.experimental.enable_op_determinism()

X, y = load_diabetes(return_X_y=True, scaled=False)
X = X.astype("float32")
y = y.astype("float32")
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.25, random_state=SEED)
# targets are disease progression scores (25..346); train on a standardised target
y_mean, y_std = float(y_train.mean()), float(y_train.std())
print(f"train {X_train.shape} val {X_val.shape} target mean {y_mean:.1f} std {y_std:.1f}")

BATCH = 32
EPOCHS = 30
steps_per_epoch = int(np.ceil(len(X_train) / BATCH))


def make_ds(features, target, training):
    ds = tf.data.Dataset.from_tensor_slices((features, (target - y_mean) / y_std))
    if training:
        ds = ds.shuffle(len(features), seed=SEED, reshuffle_each_iteration=True)
    return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


train_ds = make_ds(X_train, y_train, training=True)
val_ds = make_ds(X_val, y_val, training=False)


class ProgressionRegressor(tf.keras.Model):
    def __init__(self, hidden=64, **kwargs):
        super().__init__(**kwargs)
        self.norm = tf.keras.layers.Normalization(axis=-1)
        self.d1 = tf.keras.layers.Dense(hidden, activation="relu")
        self.d2 = tf.keras.layers.Dense(hidden // 2, activation="relu")
        self.drop = tf.keras.layers.Dropout(0.1)
        self.out = tf.keras.layers.Dense(1)
        self.huber = tf.keras.losses.Huber(delta=1.0)
        self.loss_tracker = tf.keras.metrics.Mean(name="loss")
        self.mae_tracker = tf.keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, x, training=False):
        h = self.norm(x)
        h = self.d1(h)
        h = self.drop(h, training=training)
        h = self.d2(h)
        return tf.squeeze(self.out(h), axis=-1)

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_tracker]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = self.huber(y, pred)
        grads = tape.gradient(loss, self.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 5.0)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        # report MAE in the original units
        self.mae_tracker.update_state(y * y_std, pred * y_std)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data
        pred = self(x, training=False)
        self.loss_tracker.update_state(self.huber(y, pred))
        self.mae_tracker.update_state(y * y_std, pred * y_std)
        return {m.name: m.result() for m in self.metrics}


model = ProgressionRegressor()
model.norm.adapt(X_train)

schedule = tf.keras.optimizers.schedules.CosineDecay(
    initial_learning_rate=1e-3, decay_steps=EPOCHS * steps_per_epoch, alpha=0.05
)
model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=schedule))


class Report(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(
            "epoch {:02d} loss {:.4f} mae {:.2f} val_loss {:.4f} val_mae {:.2f}".format(
                epoch + 1, logs["loss"], logs["mae"], logs["val_loss"], logs["val_mae"]
            )
        )


model.fit(train_ds, validation_data=val_ds, epochs=EPOCHS, callbacks=[Report()], verbose=0)

result = model.evaluate(val_ds, verbose=0, return_dict=True)
print(f"final val_loss {result['loss']:.4f} val_mae {result['mae']:.2f}")
