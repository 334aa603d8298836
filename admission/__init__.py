"""Atoll's admission side: the ``atoll`` commands (``cli``), the simulator, the admission-check
controller and the cluster port (``kube``), each a package of its own; dependencies run one way,
top to bottom, as the import contracts in pyproject.toml state."""
