"""Solving: the plan that orders decisions, the solver that picks each unset choice's most preferred
legal value, and the fast answers about nearby commands and pinned values built on it."""
