"""The session layer: everything that knows pytest and xdist (see docs/development.md)."""
