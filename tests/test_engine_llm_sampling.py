"""engine.llm.sampling: logit processing (penalties, min_new_tokens, logit_bias) and the
log-probabilities requests get, checked against properties and the model's own logits."""

from __future__ import annotations

import pytest
import torch

from accord.engine.llm.batch import SeqSlice, build_batch
from accord.engine.llm.sampling import Row, logprob_entry, logprobs, process_logits, sample
from accord.engine.llm.sampling_params import SamplingParams

GREEDY = dict(temperature=0.0, max_new_tokens=8)


def row(**params) -> Row:
    output_ids = params.pop("output_ids", ())
    stop_ids = params.pop("stop_ids", ())
    return Row(SamplingParams(**{**GREEDY, **params}), torch.Generator().manual_seed(0), output_ids, stop_ids)


def test_logit_bias_minus_100_moves_greedy_off_its_token():
    logits = torch.randn(50, generator=torch.Generator().manual_seed(1))
    best = int(logits.argmax())
    biased = process_logits(logits, row(logit_bias={str(best): -100.0}))
    assert int(sample(biased[None], [row()])[0]) != best
    assert int(sample(process_logits(logits, row(logit_bias={"3": 100.0}))[None], [row()])[0]) == 3


def test_frequency_counts_repeats_presence_does_not_and_unseen_tokens_are_untouched():
    logits = torch.zeros(10)
    freq = logits - process_logits(logits, row(frequency_penalty=0.5, output_ids=[4, 4, 7]))
    pres = logits - process_logits(logits, row(presence_penalty=0.5, output_ids=[4, 4, 7]))
    assert freq[4] == pytest.approx(2 * freq[7]) and freq[7] > 0
    assert pres[4] == pytest.approx(pres[7]) and pres[7] > 0
    unseen = [i for i in range(10) if i not in (4, 7)]
    assert freq[unseen].abs().sum() == 0 and pres[unseen].abs().sum() == 0


def test_repetition_penalty_shrinks_seen_logits_towards_unlikely_whatever_their_sign():
    logits = torch.tensor([2.0, -2.0, 2.0, -2.0])
    out = process_logits(logits, row(repetition_penalty=1.5, output_ids=[0, 1]))
    assert out[0] < logits[0] and out[1] < logits[1], "seen tokens become less likely"
    assert torch.equal(out[2:], logits[2:]), "unseen tokens keep their logits"
    assert out[0] > 0 > out[1], "the sign is kept"


def test_min_new_tokens_masks_eos_and_stop_ids_until_reached():
    logits = torch.zeros(10)
    logits[9] = 10.0  # EOS is by far the best token
    early = process_logits(logits, row(min_new_tokens=2, max_new_tokens=4, stop_ids=[9, 5], output_ids=[1]))
    assert early[9] == float("-inf") and early[5] == float("-inf")
    assert int(sample(early[None], [row()])[0]) not in (9, 5)
    reached = process_logits(logits, row(min_new_tokens=2, max_new_tokens=4, stop_ids=[9, 5], output_ids=[1, 2]))
    assert torch.equal(reached, logits)


def test_top_logprobs_are_sorted_and_the_greedy_token_is_first_with_log_softmax_value():
    logits = torch.randn(40, generator=torch.Generator().manual_seed(2))
    lp = logprobs(logits, SamplingParams(**GREEDY))
    token = int(sample(logits[None], [row()])[0])
    entry = logprob_entry(lp, token, 5)
    tops = entry[1::2]
    assert tops == sorted(tops, reverse=True)
    assert entry[0] == pytest.approx(float(torch.log_softmax(logits, -1)[token]))
    assert int(entry[2]) == token and entry[1] == entry[0]
    assert torch.exp(lp).sum() == pytest.approx(1.0, abs=1e-5)


def test_sampled_logprobs_use_the_temperature():
    logits = torch.randn(40, generator=torch.Generator().manual_seed(3))
    hot = logprobs(logits, SamplingParams(temperature=2.0))
    assert torch.allclose(hot, torch.log_softmax(logits / 2.0, -1))


def test_worker_logprobs_equal_log_softmax_of_the_models_logits():
    """Output and prompt log-probabilities a request gets are those of the model's own logits."""
    from accord.engine.llm.settings import EngineSettings
    from accord.engine.llm.worker import Worker
    from tests.test_engine_llm_server import server_config

    torch.set_num_threads(1)
    settings = EngineSettings.from_config(server_config())
    worker = Worker(settings, settings.topology.all_ranks()[0])
    prompt = [256, *b"logprobs"]
    pages = worker.runner.pool.alloc(1)
    logits = worker.runner.forward(build_batch([SeqSlice(prompt, 0, pages, True, all_logits=True)],
                                               settings.page_size, torch.device("cpu")))
    worker.runner.pool.release(pages)
    expected = torch.log_softmax(logits, -1)
    message = {"type": "generate", "rid": "r", "input_ids": prompt, "stream": False,
               "logprobs": {"top": 3, "start": 0},
               "sampling": {"max_new_tokens": 1, "temperature": 0.0, "ignore_eos": True}}
    out = []
    pending = [message]
    while pending or worker.has_work():
        out += worker.step(pending)
        pending = []
    found = out[-1]["logprobs"]
    token = out[-1]["ids"][0]
    assert token == int(logits[-1].argmax())
    assert found["output"][0][0] == pytest.approx(float(expected[-1, token]), abs=1e-5)
    assert [t for _, t, _ in found["input"]] == prompt and found["input"][0][0] is None
    for position, (lp, t, top) in enumerate(found["input"][1:], start=1):
        assert lp == pytest.approx(float(expected[position - 1, t]), abs=1e-5)
        assert [v for v, _ in top] == sorted((v for v, _ in top), reverse=True)
