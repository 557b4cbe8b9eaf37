"""Explaining and fixing: minimal conflicts, verified and ranked fixes, the diagnosis that joins them,
and the report printed as text or JSON."""
