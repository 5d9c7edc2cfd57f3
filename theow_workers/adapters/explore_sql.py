"""Moved to ``theow_workers.store``; kept for the replay modules until their SQL moves there too."""

from theow_workers.store.explore import ExploreStore
from theow_workers.store.schema import ExplorationRow, ProposalRow

__all__ = ["ExplorationRow", "ExploreStore", "ProposalRow"]
