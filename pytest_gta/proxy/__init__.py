"""The recording model proxy: an agent's model traffic, seen, budgeted, cached and recorded.

The harness starts a :class:`ModelProxy` in front of the run's model endpoint
(:func:`upstream_of` the run's adapter) and hands each case's :class:`ProxyCase` URL to the
agent under test; every request becomes an :class:`Exchange` of the case's transcript.
"""

from pytest_gta.proxy.exchange import Exchange
from pytest_gta.proxy.model_proxy import MAX_REQUEST_BYTES, ModelProxy, ProxyCase
from pytest_gta.proxy.upstream import Upstream, no_upstream_reason, upstream_of

__all__ = [
    "MAX_REQUEST_BYTES",
    "Exchange",
    "ModelProxy",
    "ProxyCase",
    "Upstream",
    "no_upstream_reason",
    "upstream_of",
]
