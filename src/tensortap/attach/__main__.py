"""``python -m tensortap.attach --config hook.json train.py ...`` (see :mod:`tensortap.attach`)."""

from tensortap.attach import main

main()
