"""The diffusion engine: serves a resolved diffusion config with real processes.

`server.serve(config)` starts a scheduler, `num_gpus` worker ranks joined with torch.distributed
into the resolved dp/cfg/sp/tp groups, and an HTTP front end. The built-in model is a tiny
DiT-style denoiser (`rules/models/tiny-dit/`). Modules that the parent, the scheduler and the
front end import stay free of torch; `worker`, `pipeline`, `model`, `weights`, `parallel` and
`graphs` are the torch side.
"""
