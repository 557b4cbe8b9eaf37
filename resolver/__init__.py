"""Accord: resolve serving-engine launch flags against rules and machine facts.

This package is generic; everything SGLang-specific is data under `rules/`. Importing it must stay
light (no torch, triton, numpy or zmq): `accord resolve` answers in a cold process.
"""
