"""What a run produces, as one typed object model: the case, the run's report, the comparison.

Layer: the core (beside :mod:`pytest_gta.dataset`), so that the run layer that builds a case,
the report layer that aggregates and shows it and the session layer that moves it between
processes all speak the same classes. Built on pydantic: the classes validate what is read,
write what is written, and generate the JSON Schema published in docs/schema/.
"""
