"""Whose failure it is: the ledger's runs and the origin decided from them.

Pure: typed runs in, an :class:`~theow_workers.core.history.model.Origin` out.
The ledger (SQL) and ``theow history eval`` (a history file) feed the same
classification; see ``docs/history.md`` for how each origin is decided.
"""
