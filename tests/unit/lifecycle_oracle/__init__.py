"""The lifecycle folds as they were when every item was a Python object holding its vector:
kept as the oracle the compact folds must agree with, decision for decision."""
