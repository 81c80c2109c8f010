"""The stranger corpus: training programs written by authors who never saw the rules (see
``__main__``)."""
