"""A plain XGBClassifier script (it never imports tensortap) for the outcome tests: digits,
fit with eval_set=[train, validation] as scikit-learn users write it."""

import numpy as np
import xgboost as xgb
from sklearn.datasets import load_digits

x, y = load_digits(return_X_y=True)
order = np.random.default_rng(0).permutation(len(y))
x, y = x[order], y[order]
model = xgb.XGBClassifier(n_estimators=20, max_depth=3, n_jobs=1)
model.fit(x[:1200], y[:1200], eval_set=[(x[:1200], y[:1200]), (x[1200:], y[1200:])], verbose=False)
print("validation accuracy", float(np.mean(model.predict(x[1200:]) == y[1200:])))
