"""A plain XGBClassifier script for the outcome tests: digits, fit with
eval_set=[train, validation] as scikit-learn users write it. It never imports tensortap, unless
``--own``: then a callback of its own saves, every round, the labels of the first 100
validation rows and the classes the booster predicts for them, through the hook the job
attached (``tensortap.xgboost.get_hook()``)."""

import argparse

import numpy as np
import xgboost as xgb
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--own", action="store_true")
args = parser.parse_args()
x, y = load_digits(return_X_y=True)
order = np.random.default_rng(0).permutation(len(y))
x, y = x[order], y[order]
callbacks = []
if args.own:
    import tensortap.xgboost as tt

    class OwnOutcome(xgb.callback.TrainingCallback):
        """Saves the script's own outcome: 100 rows, as classes."""

        def __init__(self) -> None:
            self.rows = xgb.DMatrix(x[1200:1300])

        def after_iteration(self, model, epoch, evals_log):
            hook = tt.get_hook()
            assert hook is not None, "run this script under tensortap run"
            predicted = np.argmax(model.predict(self.rows), axis=-1).astype(np.int32)
            hook.save_tensor("labels", y[1200:1300].astype(np.int32), "labels")
            hook.save_tensor("predictions", predicted, "predictions")
            return False

    callbacks = [OwnOutcome()]
model = xgb.XGBClassifier(n_estimators=20, max_depth=3, n_jobs=1, callbacks=callbacks)
model.fit(x[:1200], y[:1200], eval_set=[(x[:1200], y[:1200]), (x[1200:], y[1200:])], verbose=False)
print("validation accuracy", float(np.mean(model.predict(x[1200:]) == y[1200:])))
