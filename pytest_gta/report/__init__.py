"""report package of pytest-gta."""
