"""Accord's engine: starts the processes a resolved config describes and runs the serving runtime.

`engine.supervisor` is the generic process supervisor shared by both systems; `engine.llm` serves
the LLM system and `engine.diffusion` the diffusion system. Nothing here is imported by `resolver`
except on `accord serve`, so resolving never pays for torch or zmq.
"""
