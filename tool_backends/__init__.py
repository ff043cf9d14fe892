"""Built-in GTA tool backends, registered under the ``pytest_gta.tools`` entry-point group.

One module per tool family; each exposes a factory ``make_<name>(spec, context)`` that the
registry loads only when ``--gta-tools`` names it.
"""
