"""Models of the workloads. ``configs`` is pure Python (the registry uses it); ``gpt`` needs torch."""
