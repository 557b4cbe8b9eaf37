"""Model facts read from a local checkpoint folder's config.json / model_index.json."""

from __future__ import annotations

import json

import pytest

import accord.resolver.facts.model as model_facts_module
from accord.resolver.errors import UsageError
from accord.resolver.facts.machine import load_facts
from accord.resolver.facts.schema import contradictions, type_problem
from accord.resolver.facts.model import model_facts, model_note

LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
         "vocab_size": 128256, "torch_dtype": "bfloat16"}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
               "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "n_routed_experts": 256,
               "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
               "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
DEEPSEEK_V32 = {**DEEPSEEK_V3, "architectures": ["DeepseekV32ForCausalLM"], "index_topk": 2048}
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
              "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
              "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "num_experts": 512}
NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "num_hidden_layers": 52,
              "hybrid_override_pattern": "M-M-M-MM-M-M*-", "num_attention_heads": 32}
GEMMA3 = {"architectures": ["Gemma3ForConditionalGeneration"], "vision_config": {"hidden_size": 1152},
          "text_config": {"hidden_size": 2560, "num_hidden_layers": 34, "num_attention_heads": 8,
                          "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 1024,
                          "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
                          "max_position_embeddings": 131072},
          "torch_dtype": "bfloat16"}
GPT_OSS = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "num_hidden_layers": 24,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 12, "num_local_experts": 32,
           "quantization_config": {"quant_method": "mxfp4"}}
MISTRAL = {"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
           "sliding_window": 4096}
QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_attention_heads": 28,
         "sliding_window": 131072, "use_sliding_window": False}
WHISPER = {"architectures": ["WhisperForConditionalGeneration"], "is_encoder_decoder": True,
           "d_model": 1280, "num_mel_bins": 128, "encoder_attention_heads": 20}


def write_model(folder, config, name="config.json"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(config if isinstance(config, str) else json.dumps(config))
    return str(folder)


def test_dense_gqa_model(tmp_path):
    facts = model_facts(write_model(tmp_path / "llama", LLAMA))
    assert facts == {
        "model.architecture": "LlamaForCausalLM", "model.attention": "mha", "model.context_length": 131072,
        "model.dtype": "bfloat16", "model.has_sinks": False, "model.head_dim": 128,
        "model.hidden_size": 4096, "model.is_encoder_decoder": False, "model.is_multimodal": False,
        "model.moe_experts": 0, "model.num_attention_heads": 32, "model.num_key_value_heads": 8,
        "model.num_layers": 32, "model.quant_method": None, "model.sliding_window": None,
        "model.vocab_size": 128256,
    }
    assert list(facts) == sorted(facts)


def test_every_fact_matches_the_schema(tmp_path):
    for i, config in enumerate([LLAMA, DEEPSEEK_V3, DEEPSEEK_V32, QWEN3_NEXT, NEMOTRON_H, GEMMA3,
                                GPT_OSS, MISTRAL, QWEN2, WHISPER]):
        for key, value in model_facts(write_model(tmp_path / str(i), config)).items():
            assert type_problem(key, value) is None, (config["architectures"], key, value)


def test_deepseek_v3_is_mla_moe_fp8_with_qk_head_width(tmp_path):
    facts = model_facts(write_model(tmp_path / "dsv3", DEEPSEEK_V3))
    assert facts["model.attention"] == "mla" and facts["model.moe_experts"] == 256
    assert facts["model.head_dim"] == 192 and facts["model.quant_method"] == "fp8"


def test_mla_is_recognised_by_architecture_when_the_marker_is_missing(tmp_path):
    config = {k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"}
    assert model_facts(write_model(tmp_path / "m", config))["model.attention"] == "mla"


def test_deepseek_v32_indexer_makes_it_dsa(tmp_path):
    assert model_facts(write_model(tmp_path / "dsv32", DEEPSEEK_V32))["model.attention"] == "dsa"


def test_qwen3_next_is_hybrid_linear_moe(tmp_path):
    facts = model_facts(write_model(tmp_path / "q3n", QWEN3_NEXT))
    assert facts["model.attention"] == "hybrid_linear" and facts["model.moe_experts"] == 512


def test_layer_types_with_linear_attention_are_hybrid_linear(tmp_path):
    config = {"architectures": ["SomeNewForCausalLM"], "layer_types": ["linear_attention", "full_attention"]}
    assert model_facts(write_model(tmp_path / "m", config))["model.attention"] == "hybrid_linear"


def test_mamba_hybrid(tmp_path):
    assert model_facts(write_model(tmp_path / "nh", NEMOTRON_H))["model.attention"] == "hybrid_mamba"


def test_multimodal_model_reads_language_numbers_from_text_config(tmp_path):
    facts = model_facts(write_model(tmp_path / "gemma3", GEMMA3))
    assert facts["model.is_multimodal"] is True and facts["model.num_layers"] == 34
    assert facts["model.attention"] == "hybrid_swa" and facts["model.sliding_window"] == 1024
    assert facts["model.dtype"] == "bfloat16"  # top-level, not in text_config


def test_gpt_oss_has_sinks_experts_and_mxfp4(tmp_path):
    facts = model_facts(write_model(tmp_path / "gptoss", GPT_OSS))
    assert facts["model.has_sinks"] is True and facts["model.moe_experts"] == 32
    assert facts["model.attention"] == "hybrid_swa" and facts["model.quant_method"] == "mxfp4"


def test_sliding_window_on_every_layer_is_swa_unless_switched_off(tmp_path):
    mistral = model_facts(write_model(tmp_path / "mistral", MISTRAL))
    assert (mistral["model.attention"], mistral["model.sliding_window"]) == ("swa", 4096)
    qwen2 = model_facts(write_model(tmp_path / "qwen2", QWEN2))
    assert (qwen2["model.attention"], qwen2["model.sliding_window"]) == ("mha", None)


def test_whisper_is_encoder_decoder_and_multimodal(tmp_path):
    facts = model_facts(write_model(tmp_path / "whisper", WHISPER))
    assert facts["model.is_encoder_decoder"] is True and facts["model.is_multimodal"] is True
    assert facts["model.hidden_size"] == 1280


def test_missing_kv_heads_means_one_per_query_head(tmp_path):
    config = {k: v for k, v in LLAMA.items() if k != "num_key_value_heads"}
    assert model_facts(write_model(tmp_path / "m", config))["model.num_key_value_heads"] == 32


def test_field_of_unexpected_type_is_unknown_not_an_error(tmp_path):
    config = {**LLAMA, "num_hidden_layers": "thirty-two", "moe_num_experts": [64, 64]}
    facts = model_facts(write_model(tmp_path / "m", config))
    assert "model.num_layers" not in facts and "model.moe_experts" not in facts


def test_diffusion_folder_gives_pipeline_and_hub_id(tmp_path):
    index = {"_class_name": "FluxPipeline", "_name_or_path": "black-forest-labs/FLUX.1-dev"}
    facts = model_facts(write_model(tmp_path / "flux", index, "model_index.json"), system="diffusion")
    # task and CFG use come from rules/diffusion/data/pipelines.yaml (upstream FluxSamplingParams has
    # no default negative prompt, so FLUX samples without classifier-free guidance)
    assert facts == {"model.id": "black-forest-labs/FLUX.1-dev", "model.pipeline": "FluxPipeline",
                     "model.task_type": "image_gen", "model.uses_cfg": False}


def test_hub_id_overrides_its_pipelines_cfg_default(tmp_path):
    # upstream ZImageTurboSamplingParams: guidance_scale 0.0, while ZImageSamplingParams uses 5.0
    turbo = {"_class_name": "ZImagePipeline", "_name_or_path": "Tongyi-MAI/Z-Image-Turbo"}
    base = {"_class_name": "ZImagePipeline", "_name_or_path": "Tongyi-MAI/Z-Image"}
    assert model_facts(write_model(tmp_path / "t", turbo, "model_index.json"), "diffusion")["model.uses_cfg"] is False
    assert model_facts(write_model(tmp_path / "b", base, "model_index.json"), "diffusion")["model.uses_cfg"] is True


def test_hub_id_is_recovered_from_a_hugging_face_cache_folder(tmp_path):
    folder = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "abc123"
    assert model_facts(write_model(folder, LLAMA))["model.id"] == "meta-llama/Llama-3.1-8B"


def test_a_hub_id_no_source_knows_gives_unknown_model_facts_and_a_warning_naming_it():
    assert model_facts("no-such-org/no-such-model") == {}
    note = model_note("no-such-org/no-such-model", "llm")
    assert "no-such-org/no-such-model" in note and "unknown" in note


def test_a_path_missing_here_gives_unknown_model_facts_and_a_warning(tmp_path):
    path = str(tmp_path / "no" / "such" / "folder")
    assert model_facts(path) == {}
    assert "does not exist on this machine" in model_note(path, "llm")


@pytest.mark.parametrize("make, words", [
    (lambda root: root, "folder without config.json"),
    (lambda root: (root / "weights.bin").write_bytes(b"x") and root / "weights.bin", "is a file"),
])
def test_a_model_path_that_is_not_a_model_folder_is_a_usage_error(tmp_path, make, words):
    path = str(make(tmp_path))
    with pytest.raises(UsageError, match=words):
        model_facts(path)
    with pytest.raises(UsageError, match=words):
        model_note(path, "llm")


def test_a_folder_of_the_other_system_is_a_usage_error(tmp_path):
    write_model(tmp_path / "m", LLAMA)
    with pytest.raises(UsageError, match="model_index.json"):
        model_facts(str(tmp_path / "m"), system="diffusion")


def test_no_path_describes_the_builtin_model(tmp_path, monkeypatch):
    monkeypatch.setitem(model_facts_module.BUILTIN_MODELS, "llm", tmp_path / "tiny")
    assert model_facts(None) == {}
    write_model(tmp_path / "tiny", LLAMA)
    assert model_facts(None)["model.num_layers"] == 32


def test_malformed_config_names_file_and_line(tmp_path):
    path = write_model(tmp_path / "bad", '{\n  "num_hidden_layers": 2,\n  "vocab_size": ,\n}')
    with pytest.raises(UsageError) as err:
        model_facts(path)
    assert "config.json, line 3" in str(err.value)


def test_config_that_is_not_an_object_is_refused(tmp_path):
    with pytest.raises(UsageError, match="expected a JSON object"):
        model_facts(write_model(tmp_path / "bad", "[1, 2]"))


def test_fact_override_beats_the_model_folder(tmp_path):
    path = write_model(tmp_path / "dsv3", DEEPSEEK_V3)
    facts = load_facts("h200", ["model.attention=mha"], model_path=path)
    assert facts["model.attention"] == "mha" and facts["model.moe_experts"] == 256
    assert contradictions(facts) == []
