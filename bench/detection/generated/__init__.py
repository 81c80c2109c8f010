"""A detection benchmark generated from a declared space, so it cannot be memorised.

- space.py: ``draw(seed, space)``, a healthy training run (architecture, task, optimizer,
  schedule...); the partition into the dev space and the held-out family space.
- faults.py: 28 kinds of fault as mutations of a draw, each with the symptom it must show.
- faults_family.py: a second, independent implementation of each kind (the family split's).
- faults_dev2.py: a third one (the dev2 split's: the dev space, a second development split).
- train.py: ``train(case, hook)``, the training loop a person writes, recording its own numbers.
- validate.py: the validation pass without tensortap (healthy runs train, faults show).
- suite.py: ``cases(split)``, the dev, heldout (by seed), family and dev2 cases; accepted.json, the
  validated draws.
- run.py: a case trained into a cached trial, the rules evaluated over it (``evaluate``).
- scoring.py: false alarms, recall, per kind and per rule, per split.

``python -m bench.detection.generated --help`` runs it; the hand-written programs of
bench/detection stay as the smoke set.
"""
