"""Which of a booster's evaluation metrics are losses: XGBoost's ``logloss``, ``rmse``, ... are
(lower is better, on the scale of what boosting minimises); ``error``, ``merror``, ``auc``,
``ndcg``, ... are rates or scores, never "a loss". The XGBoost hook saves the training set's
first loss metric as the round's ``vitals/loss``; the rules of losses compare only losses."""

from __future__ import annotations

#: XGBoost's metrics that are a loss (``@`` parameters aside: ``tweedie-nloglik@1.5``).
LOSS_METRICS = frozenset(
    {"logloss", "mlogloss", "rmse", "rmsle", "mae", "mape", "mphe", "gamma-deviance", "quantile"}
)
#: poisson-nloglik, gamma-nloglik, cox-nloglik, tweedie-nloglik, aft-nloglik: losses too.
_NLOGLIK = "-nloglik"


def is_loss_metric(metric: str) -> bool:
    """Whether XGBoost's ``metric`` (``logloss``, ``error``, ``tweedie-nloglik@1.5``) is a loss,
    not an error rate or a ranking score."""
    base = metric.partition("@")[0]
    return base in LOSS_METRICS or base.endswith(_NLOGLIK)
