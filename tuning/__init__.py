"""The autotuner (installed as ``sparselab.tuning``)."""
