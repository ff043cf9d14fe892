"""scoring package of pytest-gta."""
