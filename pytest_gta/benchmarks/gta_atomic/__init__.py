"""GTA-Atomic: the GTA release's queries, in step and end-to-end mode, scored by the official code.

One implementation of :class:`pytest_gta.run.benchmark.Benchmark`: :mod:`.benchmark` (the
cases, how one runs, the header) and :mod:`.reporting` (the run's report, for the controller's
collector).
"""
