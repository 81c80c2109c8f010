"""The names a caller hands :meth:`Trial.series`: ``"loss"`` for the run's loss, and an error
that lists the series there are for a name the trial never saved (the README's
``trial.series("loss")`` returned no rows, silently, on a PyTorch loss module whose series is
``CrossEntropyLoss_output_0``)."""

from __future__ import annotations

from collections.abc import Iterable

from tensortap.core._vitals import Vital
from tensortap.exceptions import SeriesUnavailable
from tensortap.trials._index import natural_key

#: The name that means "the run's loss" when no tensor of the trial is called that.
LOSS = "loss"
#: How many series names an error shows.
SHOWN = 12


def loss_names(known: set[str], losses: Iterable[str]) -> list[str]:
    """The run's loss: ``vitals/loss`` (every step) when saved, else the tensors of the
    ``losses`` collection."""
    if Vital.LOSS in known:
        return [Vital.LOSS]
    return sorted(losses, key=natural_key)


def resolve_names(names: str | Iterable[str], known: set[str], loss: list[str]) -> list[str]:
    """``names`` as saved: ``"loss"`` (when nothing is called that) becomes ``loss``; a name
    the trial never saved raises SeriesUnavailable naming the series there are."""
    asked = [names] if isinstance(names, str) else list(names)
    out: list[str] = []
    for name in asked:
        if name in known:
            out.append(name)
        elif name == LOSS and loss:
            out.extend(loss)
        else:
            raise SeriesUnavailable(name, _listed(known, loss))
    return list(dict.fromkeys(out))


def _listed(known: set[str], loss: list[str]) -> str:
    if not known:
        return "the trial has saved nothing yet"
    rest = sorted(known - set(loss), key=natural_key)
    names = [f"{n!r} (the loss)" for n in loss] + [repr(n) for n in rest]
    more = f", ... ({len(names)} in all)" if len(names) > SHOWN else ""
    return (
        f"it has {', '.join(names[:SHOWN])}{more}; trial.series_keys() lists every series, "
        "trial.series(regex=...) reads those matching a pattern (no error when none does)"
    )
