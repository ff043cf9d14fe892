"""Plain helpers of pytest-gta's own tests: what a test module imports, as opposed to fixtures.

Fixtures stay in the ``conftest.py`` files (the root one and ``tests/conftest.py``), which pytest
finds by itself; nothing imports a conftest (``tests/test_house_rules.py`` checks it). Everything
else a test shares lives here and is imported by its package path, ``from tests.helpers.X import``:

- :mod:`~tests.helpers.paths`: the checkout's root, the bundled sample, this package.
- :mod:`~tests.helpers.gta_run`: running the plugin (``gta``, ``gta_process``) and its flags.
- :mod:`~tests.helpers.optional`: what tests need beyond the project's dependencies, and
  :func:`~tests.helpers.optional.require`, which skips with the install hint (fails in CI).
- :mod:`~tests.helpers.release`: where the real GTA release is looked for.
- :mod:`~tests.helpers.processes`: what a child process that a test interrupts needs.
- :mod:`~tests.helpers.run_context`: a run layer's context on replay tools.
- :mod:`~tests.helpers.retries`: the waits the model adapters' retry loop chose.
- servers on 127.0.0.1: :mod:`~tests.helpers.scripted_server`,
  :mod:`~tests.helpers.oracle_server`, :mod:`~tests.helpers.agent_model_server`,
  :mod:`~tests.helpers.hostile_server`, :mod:`~tests.helpers.file_server`,
  :mod:`~tests.helpers.hf_server`; :mod:`~tests.helpers.browser` (headless Chromium).
- agents under test: :mod:`~tests.helpers.gta_agents` (``--gta-agent``),
  ``gta_agent_cli.py`` (``--gta-agent-command``).
- scripts that tests start by path: ``serve_fixture_server.py``, ``sandbox_probe.py``,
  ``gta_agent_cli.py``.

The root ``conftest.py`` imports from here, and pytest loads it for any run inside the checkout,
so this ``__init__`` imports nothing, and :mod:`paths`, :mod:`release`, :mod:`optional` (with
:mod:`browser`) and :mod:`gta_run` nothing beyond pytest and the standard library at import.
"""
