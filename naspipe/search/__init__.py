"""The search phase: score subnets with a trained supernet's weights, search the best one.

``subnet_file`` and ``evolution`` are pure Python (no torch); ``supernet``, ``decode`` and
``evaluate`` load layers from a run's checkpoint and score subnets on held-out data.
"""
