"""The LLM serving engine: a resolved config in, a running OpenAI-compatible server out.

Process topology (started by `server.serve` under one supervisor ProcessGroup):

    http (front end + tokenizer) --requests--> scheduler ranks (one per dp, pp, tp rank)
         ^                                          | the request leader of each DP group
         +------ text ------ detokenizer <--ids------+

Modules, each with one job:
- `settings`: what the engine reads from the resolved config, checked once;
- `model_config`, `weights`, `model`: the Llama-style decoder, sharded by TP and PP;
- `parallel`: torch.distributed groups and collectives; `kv_cache`, `radix_cache`: the paged KV
  pool and prefix sharing; `attention`: the torch_native and triton backends (kernels/ with
  impl "torch" or "triton": KV writes, attention and, in `model`, RMSNorm);
- `batch`, `model_runner`, `cuda_graph`, `sampling`, `sampling_params`: one forward step and
  its tokens;
- `scheduler`: the batching policy; `worker`: one rank's step, kept in lockstep with its group;
- `grammar`: constrained decoding (xgrammar, llguidance); `cpu_threads`: a CPU rank's threads;
- `scheduler_process`, `detokenizer`, `http_server`: the processes; `messages`: their msgpack
  wire format; `tokenizer`: the byte-level tokenizer of the built-in model;
- the front end: `http_server` (route table and handlers), `openai_protocol` (request parsing and
  response shapes), `tool_calls`, `reasoning`, `front_end` (requests in flight, drain, watchdog), `api_keys`,
  `request_errors`.
"""
