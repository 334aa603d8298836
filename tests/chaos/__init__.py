"""Chaos runs: the controller behind a fault-injecting proxy, killed and restarted at random,
with Kueue and an adversarial scheduler around it; every run ends with an audit of the API
state (``python -m tests.chaos``, ``make chaos``)."""
