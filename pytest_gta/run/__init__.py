"""The run layer: one episode per case, and the strategies that run episodes ahead.

See docs/development.md for where it sits among the layers.
"""
