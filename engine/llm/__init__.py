"""The LLM serving engine: a resolved config in, a running OpenAI-compatible server out.

Process topology (one box per process, started by `server.serve` under a ProcessGroup):

    http (front end + tokenizer) --requests--> scheduler ranks (one per dp, pp, tp rank)
         ^                                          | leader of each DP group
         +------ text ------ detokenizer <--ids------+

Modules, each with one job: `settings` (what the engine reads from the config, checked),
`model_config`/`weights`/`model` (the Llama decoder), `parallel` (torch.distributed groups),
`kv_cache`/`radix_cache` (paged KV pool and prefix sharing), `attention` (backends), `sampling`,
`model_runner` (one forward step), `scheduler` (batching policy), `scheduler_process`,
`detokenizer`, `tokenizer`, `http_server`, `messages` (the msgpack wire format).
"""
