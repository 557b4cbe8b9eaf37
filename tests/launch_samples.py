"""Sample values of launch flags for the property tests: each flag's finite domain, or a few sizes."""

from __future__ import annotations

INT_SAMPLES = (0, 1, 2, 3, 4, 8, 16, 64, 4096)


def sampled_flags(plan, names) -> dict[str, list]:
    """`names` (catalog flags) with the values a property test draws from, in name order; flags
    with neither a finite domain nor an integer type are left out."""
    out = {}
    for name in sorted(names):
        flag = plan.catalog.flags.get(name)
        if flag is None:
            continue
        if flag.finite_domain is not None:
            out[name] = list(flag.finite_domain)
        elif flag.type == "int":
            out[name] = ([None] if flag.nullable else []) + list(INT_SAMPLES)
    return out
