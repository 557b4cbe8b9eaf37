"""Moved: the one preference ranking is resolver/explaining/ranking.py, beside the explanations it
ranks. These names stay importable from here for callers not yet moved."""

from accord.resolver.explaining.ranking import order_values, slowness, speed_rank

__all__ = ["order_values", "slowness", "speed_rank"]
