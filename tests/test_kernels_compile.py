"""Every kernel compiled offline for real GPU targets, without a GPU (Triton's bundled ptxas / LLVM).

What this protects, on a machine with no GPU:
- each kernel builds for Hopper (sm_90) and MI300 (gfx942), including the bf16 tensor-core path the
  interpreter cannot run, and the shipped attention tiles compile without register spills;
- the lowest CUDA capability each KV-cache dtype needs, under every Triton release in
  kernels/capabilities.yaml (offline compiles of each release, by benchmarks/kernel_capabilities.py),
  is exactly what the kernel modules declare in REQUIREMENTS["min_cuda_sm"] (which
  tests/test_kernels_rules.py ties to rules/llm/kernels.yaml); and that table's row for the
  installed Triton still holds, checked by compiling at each of its boundaries;
- the FP8 quantizer keeps the sign of zero in compiled code, not only in the interpreter.

Runs in its own process without the interpreter (tests/test_kernels_isolated.py). Compiled
kernels land in Triton's cache (~/.triton/cache), so only a first run pays the compile time.
"""

import functools
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from accord.kernels.testing import kernel_test_device

DEVICE = kernel_test_device()

import triton  # noqa: E402  (after the process check)
from triton.backends.compiler import GPUTarget  # noqa: E402

from accord.kernels import capabilities, kv_quant, rmsnorm  # noqa: E402
from accord.kernels.attention import decode, decode_attention, extend  # noqa: E402
from accord.kernels.launch import INTERPRETER  # noqa: E402
from accord.kernels.testing import compile_offline  # noqa: E402

if INTERPRETER:
    pytest.skip("offline compiles need Triton's compiler, not its interpreter: run without "
                "TRITON_INTERPRET", allow_module_level=True)

SM90 = GPUTarget("cuda", 90, 32)
GFX942 = GPUTarget("hip", "gfx942", 64)

KV_MODULES = {decode: "attention.decode", extend: "attention.extend", kv_quant: "kv_quant"}
"""Kernel modules whose kernels read or write the KV cache, and their names in the table."""

INSTALLED = triton.__version__
TABLE = capabilities.load_table()


@functools.lru_cache(maxsize=None)
def compiled(name: str, target: GPUTarget, cache: str = "fp16", model: str = "fp16", head_dim: int = 128):
    kernel, types, constexprs, num_warps = capabilities.launch(name, cache, model, head_dim)
    return compile_offline(kernel, target, types, constexprs, num_warps=num_warps)


@pytest.mark.parametrize("name, cache, model, head_dim, target", [
    ("decode_split", "fp16", "fp16", 128, SM90),
    ("decode_split", "bf16", "bf16", 128, SM90),
    ("decode_split", "fp8e4nv", "bf16", 128, SM90),
    ("decode_merge", "fp16", "fp16", 128, SM90),
    ("extend", "fp16", "fp16", 128, SM90),
    ("extend", "bf16", "bf16", 256, SM90),
    ("store_kv", "fp8e4nv", "bf16", 128, SM90),
    ("quantize", "fp8e5", "fp16", 128, SM90),
    ("dequantize", "fp8e4nv", "fp16", 128, SM90),
    ("rms_norm", "fp16", "bf16", 128, SM90),
    ("decode_split", "fp16", "fp16", 128, GFX942),
    ("extend", "fp8e4nv", "fp16", 128, GFX942),
], ids=lambda value: value.arch if isinstance(value, GPUTarget) else str(value))
def test_kernel_compiles_for_gpu_targets(name, cache, model, head_dim, target):
    try:
        binary = compiled(name, target, cache, model, head_dim)
    except Exception as exc:
        if "ld.lld" in str(exc):  # Triton 3.4 and older link AMD code with a ROCm linker this machine lacks
            pytest.skip(f"Triton {INSTALLED} needs a ROCm installation (ld.lld) to compile for AMD GPUs")
        raise
    assert binary.asm.get("cubin" if target.backend == "cuda" else "hsaco")


def stack_bytes(binary) -> int:
    """Per-thread stack (register spills) of a compiled CUDA kernel, from cuobjdump."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(binary.asm["cubin"])
        # Triton 3.4 and newer name the tool in triton.knobs; older ones only bundle it.
        tool = triton.knobs.nvidia.cuobjdump.path if hasattr(triton, "knobs") else \
            str(Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump")
        usage = subprocess.run([tool, "--dump-resource-usage", str(path)],
                               capture_output=True, text=True, check=True).stdout
    return int(usage.split("STACK:")[1].split()[0])


@pytest.mark.parametrize("name, head_dim", [("decode_split", 128), ("extend", 128), ("extend", 256)])
def test_shipped_attention_tiles_compile_without_register_spills(name, head_dim):
    assert stack_bytes(compiled(name, SM90, "fp16", "fp16", head_dim)) == 0


def table_row() -> dict:
    row = TABLE["triton"].get(INSTALLED)
    if row is None:
        pytest.fail(f"kernels/capabilities.yaml has no row for the installed Triton {INSTALLED}: run "
                    "benchmarks/kernel_capabilities.py with it (see that script's docstring).")
    return row


def boundary_targets(targets: list[str], built: list[str]) -> list[str]:
    """The targets where "builds" changes along TARGETS order, and both ends: what a probe of the
    installed Triton must confirm to show the stored row still holds, at a fraction of its cost."""
    chosen = {targets[0], targets[-1]}
    for below, above in itertools.pairwise(targets):
        if (below in built) != (above in built):
            chosen.update((below, above))
    return [t for t in targets if t in chosen]


def builds_in_a_fresh_process(checks: list[tuple[str, str, str]]) -> list[bool]:
    """kernels.capabilities.builds for each (kernel, target, combo), from a process that has compiled
    nothing: this one has, and a Triton process remembers (see capabilities._compiles_alone)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json, sys\nfrom accord.kernels import capabilities as c\nc._import_the_compiler()\n"
            "print(json.dumps([c.builds(*check) for check in json.loads(sys.argv[1])]))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(checks)], capture_output=True, text=True,
                          env=env, timeout=3600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", list(KV_MODULES.values()))
def test_the_stored_row_of_the_installed_triton_is_what_it_builds(module):
    """The table's row for this Triton, checked at every boundary by compiling now."""
    row = table_row()
    cuda = [t for t in capabilities.TARGETS if t.startswith("sm")]
    points = [(combo, target) for combo, built in row[module]["kv"].items()
              for target in boundary_targets(cuda, built)]
    kernels = capabilities.MODULE_KERNELS[module]["kv"]
    results = builds_in_a_fresh_process([(name, target, combo) for combo, target in points for name in kernels])
    wrong = []
    for index, (combo, target) in enumerate(points):
        now = all(results[index * len(kernels):(index + 1) * len(kernels)])
        if now != (target in row[module]["kv"][combo]):
            wrong.append((combo, target, "builds now" if now else "no longer builds"))
    assert not wrong, f"{module} under Triton {INSTALLED}: {wrong}; rerun benchmarks/kernel_capabilities.py"


@pytest.mark.parametrize("version", list(TABLE["triton"]))
@pytest.mark.parametrize("module", list(KV_MODULES), ids=lambda m: m.__name__)
def test_each_kv_dtype_needs_exactly_the_cuda_capability_the_module_declares(module, version):
    """REQUIREMENTS["min_cuda_sm"] under each probed Triton release is the floor the table shows."""
    found = capabilities.floors(TABLE["triton"][version], KV_MODULES[module])
    declared = {kv: capabilities.min_cuda_sm(module.REQUIREMENTS, kv, version)
                for kv in module.REQUIREMENTS["kv_cache_dtypes"]}
    assert found == {kv: sm for kv, sm in declared.items() if sm}


@pytest.mark.parametrize("version", list(TABLE["triton"]))
def test_every_module_declares_the_newest_gpu_each_release_can_target(version):
    """A release whose ptxas predates a GPU generation builds nothing for it (Triton 3.2: no
    Blackwell); REQUIREMENTS["max_cuda_sm"] says so, None when it builds for every probed GPU."""
    cuda = [t for t in capabilities.TARGETS if t.startswith("sm")]
    built = [t for t in capabilities.reachable(TABLE["triton"][version]) if t.startswith("sm")]
    assert built == cuda[:len(built)], built            # a prefix: the oldest GPUs up to some newest
    newest = None if built == cuda else int(built[-1][2:])
    for module in (*KV_MODULES, rmsnorm):
        assert capabilities.max_cuda_sm(module.REQUIREMENTS, version) == newest, module.__name__


def test_every_module_declares_the_oldest_probed_release_as_its_oldest():
    oldest = min(TABLE["triton"], key=capabilities.release)
    for module in (*KV_MODULES, rmsnorm):
        assert capabilities.release(module.REQUIREMENTS["min_triton"]) == capabilities.release(oldest)


@pytest.mark.parametrize("fp8", ["fp8e4nv", "fp8e5"])
@pytest.mark.parametrize("name", ["quantize", "store_kv"])
def test_the_quantizer_puts_the_sign_back_as_a_bit_in_compiled_code(name, fp8):
    """-0.0 must stay -0.0 (byte 0x80): the compiled code may not negate by subtracting from zero,
    which Triton 3.7 and older emit for `-x` and which turns -0.0 into +0.0 on a GPU (the
    interpreter negates exactly, so only compiled code shows it)."""
    for target in (SM90, GPUTarget("cuda", 80, 32)):
        if fp8 == "fp8e4nv" and target.arch < 89:
            continue
        llir = compiled(name, target, fp8, "bf16", 128).asm["llir"]
        assert "fsub float 0.000000e+00" not in llir and "-2147483648" in llir


def test_cpu_tensors_are_refused_outside_the_interpreter():
    q = torch.zeros(1, 2, 64, dtype=torch.float16)
    cache = torch.zeros(1, 16, 1, 64, dtype=torch.float16)
    index = torch.zeros(1, 1, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        decode_attention(q, cache, cache, index, index[0], scale=0.125)
