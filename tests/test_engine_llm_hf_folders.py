"""Hugging Face model folders, written here by transformers' `save_pretrained` from tiny random-weight
Llama, Qwen2 and Qwen3 configs: Accord's engine loads config.json, the safetensors and the tokenizer
files and computes what transformers computes.

The tokenizer is a small byte-level BPE trained on the spot (no download) with a ChatML template,
saved by transformers beside the model; one variant keeps the template inside tokenizer_config.json.
Weights are re-drawn with fan-in scaling (transformers' 0.02 init gives near-uniform logits whose
top two differ by less than fp32 summation noise, so greedy tokens would not be a fair check).

Tolerance: both run in fp32 on the same tensors; only summation order differs, so logits agree to
1e-4 absolute and 32 greedy tokens are identical.
"""

from __future__ import annotations

import json

import pytest
import torch

from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.worker import Worker
from accord.resolver.frozen import ResolvedConfig
from tests.smollm2_engine import FACTS, engine_values, greedy, last_logits

transformers = pytest.importorskip("transformers")

LOGIT_ATOL = 1e-4
CORPUS = ["Accord resolves launch flags against the facts of a machine.",
          "Paged attention keeps keys and values in fixed-size pages.",
          "Tensor parallel ranks split the attention heads; pipeline stages split the layers.",
          "The capital of France is Paris. 0123456789"] * 4
TEMPLATE = ("{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
            "{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}"
            "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
PROMPTS = ["Accord resolves", "The capital of France is", "pages 42"]
CHATS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Count to 3."}]]
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),  # q/k/v projections carry biases
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),  # per-head q/k RMSNorm
}


def train_tokenizer(template_in_config: bool, folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=TEMPLATE)
    fast.save_pretrained(str(folder))
    if template_in_config:  # the older layout: the template as a tokenizer_config.json field
        (folder / "chat_template.jinja").unlink(missing_ok=True)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    return fast


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    """(transformers model, its tokenizer, an Accord worker) for one saved folder."""
    config_class, model_class, extra = FAMILIES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    tokenizer = train_tokenizer(request.param == "qwen3", folder)
    config = getattr(transformers, config_class)(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
        tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).float().eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2:
                param.normal_(0.0, 1.0 if "embed" in name else param.shape[1] ** -0.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
            else:  # RMSNorm scales
                param.uniform_(0.5, 1.5)
    model.save_pretrained(str(folder))
    model.generation_config.eos_token_id = None  # 32 tokens whatever comes out, as Accord's ignore_eos
    settings = EngineSettings.from_config(ResolvedConfig("llm", FACTS, engine_values(
        model_path=str(folder), page_size=4, max_total_tokens=1024)))
    return model, tokenizer, Worker(settings, settings.topology.all_ranks()[0])


def test_the_saved_architecture_is_the_one_served(family):
    model, _, worker = family
    assert worker.model_config.architecture == model.config.architectures[0]
    assert worker.model_config.attention_bias == (model.config.architectures[0] == "Qwen2ForCausalLM")
    assert worker.model_config.qk_norm == (model.config.architectures[0] == "Qwen3ForCausalLM")


@pytest.mark.parametrize("text", PROMPTS)
def test_last_token_logits_match_transformers(family, text):
    model, tokenizer, worker = family
    ids = tokenizer(text, add_special_tokens=False).input_ids
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0, -1].float()
    got = last_logits(worker, ids)
    assert torch.allclose(got, expected, atol=LOGIT_ATOL, rtol=0), (got - expected).abs().max()


def test_greedy_32_tokens_match_transformers_generate(family):
    model, tokenizer, worker = family
    prompts = [tokenizer(text, add_special_tokens=False).input_ids for text in PROMPTS[:2]]
    expected = {}
    for i, ids in enumerate(prompts):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        expected[f"r{i}"] = out[0, len(ids):].tolist()
    assert all(len(tokens) == 32 for tokens in expected.values())
    assert greedy(worker, prompts, 32) == expected


@pytest.mark.parametrize("chat", CHATS, ids=["default-system", "multi-turn"])
def test_chat_template_and_tokens_match_apply_chat_template(family, chat):
    from accord.engine.llm.tokenizer import make_tokenizer

    _, tokenizer, worker = family
    ours = make_tokenizer(worker.model_config, worker.settings.model_path)
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert ours.apply_chat_template(chat) == text
    assert ours.encode(text) == tokenizer(text, add_special_tokens=False).input_ids
    assert ours.decode(ours.encode("Paris, 2024 ✓")) == "Paris, 2024 ✓"
