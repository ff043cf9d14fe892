"""agent package of pytest-gta."""
