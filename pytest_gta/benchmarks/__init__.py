"""The built-in benchmarks: GTA-Atomic and GTA-Workflow, two implementations of one seam.

Each implements :class:`pytest_gta.run.benchmark.Benchmark` and is registered under the
``pytest_gta.benchmarks`` entry-point group, as a third party's would be; the session finds them
there through the ``pytest_gta_make_benchmark`` hook, never by import.
"""
