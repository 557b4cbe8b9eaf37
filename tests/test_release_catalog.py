"""The release catalog: which launch flags each SGLang release's own parser accepts (0.4.0 to 0.5.23).

Why: Accord refuses a flag a release lacks and emits commands an older release parses, so what it reads
about a release must be exactly what that release's argparse parser holds. The raw inventories
(rules/<system>/releases/parsers/<V>.json.gz) are the parsers as dumped; the compact catalog must give
every one of them back, the generator must be deterministic, and the reader must answer without loading
anything heavy. Expected values come from the raw inventories, never from memory. No network.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from accord.resolver.commandline.releases import ReleaseCatalog, release_catalog, version_key
from accord.resolver.errors import UsageError
from accord.rules.llm.releases import generate

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = [s for s in ("llm", "diffusion") if (REPO / "rules" / s / "releases" / "catalog.json").exists()]


def _raw(system: str) -> dict[str, dict]:
    folder = REPO / "rules" / system / "releases" / "parsers"
    return {inv["release"]: inv for inv in (json.loads(gzip.decompress(p.read_bytes())) for p in folder.glob("*.json.gz"))}


@pytest.fixture(scope="module")
def raw():
    return {system: _raw(system) for system in SYSTEMS}


@pytest.fixture(scope="module")
def llm():
    cat = release_catalog("llm")
    assert cat is not None
    return cat


def _raw_action(inventory: dict, option: str) -> dict | None:
    return next((f for f in inventory["flags"] if option in f["options"]), None)


def test_the_llm_catalog_covers_every_release_from_0_4_0_to_0_5_23(llm, raw):
    assert llm.releases[0] == "0.4.0" and llm.newest == "0.5.23"
    assert set(llm.releases) == set(raw["llm"])
    assert list(llm.releases) == sorted(llm.releases, key=version_key)
    for base in ("0.4.0.post1", "0.4.10.post2", "0.5.6.post2", "0.5.12", "0.5.17"):
        assert base in llm.releases
    assert all(llm.sources[r] for r in llm.releases), "every inventory says how it was obtained"


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_compact_catalog_gives_back_every_raw_inventory_exactly(system, raw):
    cat = release_catalog(system)
    assert set(cat.releases) == set(raw[system])
    for release, inv in raw[system].items():
        rebuilt = cat.inventory(release)
        assert rebuilt == inv["flags"], release
        # JSON-identical too (1 and 1.0 and True are different defaults)
        assert json.dumps(rebuilt, sort_keys=True) == json.dumps(inv["flags"], sort_keys=True), release
        assert cat.sources[release] == inv["source"]


@pytest.mark.parametrize("system", SYSTEMS)
def test_inventories_are_stored_deterministically(system):
    for path in (REPO / "rules" / system / "releases" / "parsers").glob("*.json.gz"):
        data = path.read_bytes()
        assert generate.gzip_json(json.loads(gzip.decompress(data))) == data, path.name
        assert " at 0x" not in gzip.decompress(data).decode(), f"{path.name}: a run-dependent repr"


def test_the_generator_gives_the_same_bytes_twice_and_matches_the_stored_catalogs():
    for system in SYSTEMS:
        first = generate.render(generate.build(system))
        second = generate.render(generate.build(system))
        assert first == second
        assert (REPO / "rules" / system / "releases" / "catalog.json").read_text(encoding="utf-8") == first, (
            f"{system}: catalog.json is stale; run python -m accord.rules.llm.releases.generate")


def test_the_generator_module_runs_and_finds_nothing_stale():
    done = subprocess.run([sys.executable, "-m", "accord.rules.llm.releases.generate", "--check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_facts_an_sglang_user_knows_agree_with_the_raw_inventories(llm, raw):
    inv = raw["llm"]
    old, new = inv["0.4.10.post2"], inv["0.5.23"]
    # --cuda-graph-max-bs is old; the catalog answers with the raw action itself
    assert _raw_action(old, "--cuda-graph-max-bs") is not None
    assert llm.action("0.4.10.post2", "--cuda-graph-max-bs") == _raw_action(old, "--cuda-graph-max-bs")
    # --attn-dp-size: whatever the raw inventories say, the catalog says the same
    for release in ("0.4.10.post2", "0.5.23"):
        assert llm.action(release, "--attn-dp-size") == _raw_action(inv[release], "--attn-dp-size")
    assert _raw_action(old, "--attn-dp-size") is None
    # --tp-size exists in both, and no prefix matching: "--tp" is not an option string
    assert llm.action("0.5.23", "--tp-size") == _raw_action(new, "--tp-size")
    assert llm.action("0.5.23", "--tp") == _raw_action(new, "--tp")
    # 0.4.0's triton API and 0.5.12-0.5.17's torchcodec imports did not stop the dump
    for release in ("0.4.0", "0.5.12", "0.5.17"):
        assert len(inv[release]["flags"]) > 50


def test_action_options_of_and_spans_agree_with_a_scan_of_the_raw_inventories(llm, raw):
    inv = raw["llm"]
    releases = llm.releases
    options = sorted({o for r in releases for f in inv[r]["flags"] for o in f["options"]})
    for option in options[::7] + ["--attn-dp-size", "--cuda-graph-max-bs", "--tp-size", "--no-such-flag"]:
        where = [r for r in releases if _raw_action(inv[r], option)]
        assert llm.span(option) == ((where[0], where[-1]) if where else None), option
    for dest in ("tp_size", "tensor_parallel_size", "attention_backend", "cuda_graph_max_bs", "nope"):
        where = [r for r in releases if any(f["dest"] == dest for f in inv[r]["flags"])]
        assert llm.dest_span(dest) == ((where[0], where[-1]) if where else None), dest
    for release in ("0.4.0", "0.4.10.post2", "0.5.9", "0.5.23"):
        flags = inv[release]["flags"]
        for f in flags:
            assert llm.action(release, f["options"][-1]) == next(g for g in flags if f["options"][-1] in g["options"])
        tp = [o for f in flags if f["dest"] in ("tp_size",) for o in f["options"]]
        assert llm.options_of(release, "tp_size") == tuple(dict.fromkeys(tp))
    assert llm.options_of("0.5.23", "no_such_dest") == ()


def test_every_successor_replaced_an_option_in_the_release_that_dropped_it(llm):
    assert llm.successors, "the catalog names at least some successors"
    for old, new in llm.successors.items():
        first, last = llm.span(old)
        assert last != llm.newest, old
        dropped_in = llm.releases[llm.releases.index(last) + 1]
        assert llm.action(dropped_in, new) is not None, (old, new, dropped_in)
        assert llm.successor(old) == new
    assert llm.successor("--tp-size") is None


def test_nearest_maps_an_unlisted_version_to_the_newest_catalogued_release_not_after_it(llm):
    assert llm.nearest("0.4.10.post2") == "0.4.10.post2"
    assert llm.nearest("0.5.24") == "0.5.23"
    assert llm.nearest("1.0") == "0.5.23"
    previous = llm.releases[llm.releases.index("0.5.9") - 1]
    assert llm.nearest("0.5.9.dev1") == previous
    assert llm.nearest("0.5.9rc0") == previous
    assert llm.nearest("0.5.9+cu128") == "0.5.9"
    assert llm.nearest("0.4.10.post3") == "0.4.10.post2"
    assert llm.nearest("0.4.0") == "0.4.0"
    # an uncatalogued version reads as its nearest release everywhere
    assert llm.inventory("0.5.24") == llm.inventory("0.5.23")


@pytest.mark.parametrize("text", ["0.3.6.post3", "0.4.0rc1", "0.4.0.dev0", "0.1"])
def test_a_version_below_the_oldest_release_is_a_usage_error(llm, text):
    with pytest.raises(UsageError) as e:
        llm.nearest(text)
    assert e.value.exit_code == 2
    message = str(e.value)
    assert "0.4.0" in message and text in message and "\n" not in message


@pytest.mark.parametrize("text", ["", "latest", "v0.x", "0.5.9-banana"])
def test_text_that_is_not_a_version_is_a_usage_error(llm, text):
    with pytest.raises(UsageError, match="not an SGLang version"):
        llm.nearest(text)


def test_version_order_and_compare(llm):
    ordered = ["0.4.0.dev0", "0.4.0rc0", "0.4.0", "0.4.0.post1", "0.4.0.post2", "0.4.1", "0.4.9.post6", "0.4.10",
               "0.4.10.post2", "0.5.9.dev1", "0.5.9rc0", "0.5.9", "0.5.10", "0.5.13rc0", "0.5.13", "0.5.13.post1"]
    assert sorted(ordered, key=version_key) == ordered
    assert version_key("0.5") == version_key("0.5.0") and version_key("x") is None
    assert llm.compare("0.4.10.post2", "0.5.2") == -1
    assert llm.compare("0.5.23", "0.5.23") == 0
    assert llm.compare("0.5.24", "0.5.23") == 1
    assert llm.compare("0.4.10", "0.4.9.post6") == 1
    with pytest.raises(UsageError):
        llm.compare("nope", "0.5.23")


def test_the_catalog_is_cached_and_a_system_without_one_reads_none():
    assert release_catalog("llm") is release_catalog("llm")
    assert release_catalog("no-such-system") is None


def test_a_small_catalog_built_by_hand_round_trips():
    inventories = [
        {"release": "0.1.0", "source": "t", "flags": [
            {"options": ["--a"], "dest": "a", "default": 1, "choices": None, "nargs": None, "type": "int",
             "action": "_StoreAction"},
            {"options": ["--b", "--bee"], "dest": "b", "default": False, "choices": None, "nargs": 0, "type": None,
             "action": "_StoreTrueAction"}]},
        {"release": "0.1.1", "source": "t", "flags": [
            {"options": ["--b"], "dest": "b", "default": False, "choices": None, "nargs": 0, "type": None,
             "action": "_StoreTrueAction"},
            {"options": ["--a"], "dest": "a", "default": 1.0, "choices": None, "nargs": None, "type": "float",
             "action": "_StoreAction"},
            {"options": ["--c-new"], "dest": "c", "default": "x", "choices": ["x", "y"], "nargs": None, "type": "str",
             "action": "_StoreAction"}]},
        {"release": "0.2.0", "source": "t", "flags": [
            {"options": ["--a"], "dest": "a", "default": 1, "choices": None, "nargs": None, "type": "int",
             "action": "_StoreAction"}]},
    ]
    catalog = generate.build("test", inventories)
    cat = ReleaseCatalog(json.loads(generate.render(catalog)), "test")
    for inv in inventories:
        assert cat.inventory(inv["release"]) == inv["flags"]
    assert cat.successor("--bee") == "--b"
    assert cat.span("--b") == ("0.1.0", "0.1.1") and cat.span("--a") == ("0.1.0", "0.2.0")
    assert cat.action("0.2.0", "--a")["default"] == 1 and cat.action("0.1.1", "--a")["default"] == 1.0


def test_reading_the_catalog_imports_nothing_heavy():
    code = ("import sys\n"
            "from accord.resolver.commandline.releases import release_catalog\n"
            "cat = release_catalog('llm')\n"
            "cat.inventory('0.4.10.post2'); cat.action(cat.newest, '--tp-size'); cat.span('--tp-size')\n"
            "print(sorted(m for m in ('torch', 'triton', 'zmq', 'numpy', 'networkx', 'yaml') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_diffusion_catalog_starts_where_the_diffusion_server_does(raw):
    cat = release_catalog("diffusion")
    assert cat is not None and cat.newest == "0.5.23"
    absent = json.loads((REPO / "rules" / "diffusion" / "releases" / "absent.json").read_text())
    assert cat.releases[0] not in absent and set(absent).isdisjoint(cat.releases)
    assert version_key(absent[-1]) < version_key(cat.releases[0])
    with pytest.raises(UsageError):
        cat.nearest(absent[-1])
    inv = raw["diffusion"]
    # 0.5.23 retired --warmup: the catalog says what the raw inventories say, and names its successor
    last = cat.span("--warmup")[1]
    assert _raw_action(inv[last], "--warmup") is not None and _raw_action(inv["0.5.23"], "--warmup") is None
    assert cat.successor("--warmup") == "--warmup-mode"
    assert cat.action("0.5.23", "--warmup-mode") == _raw_action(inv["0.5.23"], "--warmup-mode")


def test_packaging_ships_the_catalog_data():
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "accord.rules.llm.releases" in config["packages"]
    assert {"**/*.json", "**/*.json.gz"} <= set(config["package-data"]["accord.rules"])
