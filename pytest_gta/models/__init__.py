"""models package of pytest-gta."""
