"""Getting the real GTA dataset: fetch, verify, unpack and inspect it.

Everything here runs only for ``--gta-download``, ``--gta-data-info`` and
``--gta-record-manifest``; the plugin's entry module never imports it.
"""

from __future__ import annotations
