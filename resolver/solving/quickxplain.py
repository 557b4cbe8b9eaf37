"""QuickXplain (Junker, 2004): a minimal subset of items for which a monotone test holds.

A conflict is minimal: its user values and hard rules are together unsatisfiable, and dropping any
one of them makes the rest satisfiable. Splitting the candidates in halves finds a k-element core
of n items in about k·log(n/k) tests instead of deletion's n, which matters with hundreds of rules.
"""

from __future__ import annotations

from typing import Callable, TypeVar

Item = TypeVar("Item")


def quickxplain(items: list[Item], unsat: Callable[[list[Item]], bool]) -> list[Item]:
    """A minimal subset of `items` for which `unsat` holds ([] when it holds of no items at all).
    `unsat` must be monotone: true of a list, it is true of every list holding it."""
    def search(background: list[Item], added: bool, candidates: list[Item]) -> list[Item]:
        if added and unsat(background):
            return []
        if len(candidates) == 1:
            return list(candidates)
        half = len(candidates) // 2
        first, second = candidates[:half], candidates[half:]
        core2 = search(background + first, bool(first), second)
        core1 = search(background + core2, bool(core2), first)
        return core1 + core2

    if not items or unsat([]):
        return []
    return search([], False, list(items))
