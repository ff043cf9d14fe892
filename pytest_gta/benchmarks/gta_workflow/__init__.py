"""GTA-Workflow (GTA-2): long deliverable tasks, produced and judged checkpoint by checkpoint.

One implementation of :class:`pytest_gta.run.benchmark.Benchmark`: :mod:`.benchmark` (the
cases, how one is produced and judged, the header), :mod:`.producers` (the project's loop or
the agent under test as a task's producer, the task shown as a query), :mod:`.collector` (the
controller's report of the run).
"""
