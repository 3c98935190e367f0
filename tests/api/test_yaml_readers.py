"""Every YAML file gpudra reads, node side included, is read by the one bounded reader (api/load.py's limits:
size, nesting, alias expansion, duplicate keys): issue 20, attacker finding 6 (the driver's `--claims` reader
rebuilt every alias, ~450 bytes asking for 10^9 list elements; six other readers had no limits either)."""

from __future__ import annotations

import ast
import gc
import json
import os
import pathlib
import tracemalloc

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.api.load import LoadError
from gpudra.api.yaml_files import load_yaml, load_yaml_documents, read_yaml
from gpudra.cdi.spec import CdiError
from gpudra.cdi.writer import load_spec_file
from gpudra.cli import cli
from gpudra.cluster.layout import ClusterDir, ClusterSetupError
from gpudra.discovery.model import DiscoveryError
from gpudra.discovery.profiles import node_profile
from gpudra.kubeletplugin.claims import MAX_CLAIM_BYTES, ClaimSourceError, LocalClaimStore
from gpudra.mig.apply import ApplyError, read_config_file
from gpudra.mig.config import configs_in_document
from tests.support.builders import allocated_claim

PACKAGE = pathlib.Path(__file__).resolve().parent.parent.parent / "gpudra"
# The one reader (load.py) and the fast path it delegates to (fast_yaml.py, which builds scalar nodes only).
BOUNDED_READER = {"api/load.py", "api/fast_yaml.py"}
_READING_CALLS = {"load", "safe_load", "load_all", "safe_load_all", "full_load", "full_load_all", "unsafe_load",
                  "unsafe_load_all", "compose", "compose_all", "parse", "scan"}


def _alias_bomb(levels: int = 9) -> str:
    """About 450 bytes whose aliases expand to 10**levels strings (the "billion laughs")."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_product_code_reads_yaml_only_through_the_bounded_reader():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in BOUNDED_READER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in _READING_CALLS and isinstance(node.value, ast.Name)
                    and node.value.id in ("yaml", "yaml_rs")):
                offenders.append(f"{relative}:{node.lineno}: {node.value.id}.{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr in ("SafeLoader", "CSafeLoader", "Loader", "CLoader",
                                                                   "FullLoader", "UnsafeLoader", "BaseLoader"):
                offenders.append(f"{relative}:{node.lineno}: a PyYAML loader ({node.attr})")
            elif isinstance(node, ast.ImportFrom) and node.module in ("yaml", "yaml_rs") and any(
                    alias.name in _READING_CALLS or alias.name.endswith("Loader") for alias in node.names):
                offenders.append(f"{relative}:{node.lineno}: from {node.module} import …")
    assert offenders == [], "read YAML with gpudra.api.yaml_files instead:\n" + "\n".join(offenders)


def test_the_bomb_is_small_and_refused_by_the_reader():
    bomb = _alias_bomb()
    assert len(bomb) < 500
    with pytest.raises(LoadError, match="aliases add .* \\(limit"):
        load_yaml(bomb, "bomb.yaml")


def test_claims_store_refuses_an_alias_bomb(tmp_path):
    (tmp_path / "default_c.yaml").write_text(_alias_bomb())
    with pytest.raises(ClaimSourceError, match="claim store file .*default_c.yaml.*aliases"):
        LocalClaimStore(str(tmp_path)).get("default", "c")


def test_claims_store_refuses_duplicate_keys_and_deep_json(tmp_path):
    (tmp_path / "default_c.yaml").write_text("kind: ResourceClaim\nkind: ResourceClaim\n")
    with pytest.raises(ClaimSourceError, match="already defined"):
        LocalClaimStore(str(tmp_path)).get("default", "c")
    os.unlink(tmp_path / "default_c.yaml")
    (tmp_path / "default_c.json").write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(ClaimSourceError, match="levels deep"):
        LocalClaimStore(str(tmp_path)).get("default", "c")


def test_cdi_spec_files_are_bounded(tmp_path):
    (tmp_path / "bomb.yaml").write_text(_alias_bomb())
    with pytest.raises(CdiError, match="cannot read CDI spec .*bomb.yaml.*aliases"):
        load_spec_file(str(tmp_path / "bomb.yaml"))
    (tmp_path / "dup.json").write_text('{"cdiVersion": "0.5.0", "cdiVersion": "0.6.0"}')
    with pytest.raises(CdiError, match="already defined"):
        load_spec_file(str(tmp_path / "dup.json"))


def test_mig_config_files_and_configmap_entries_are_bounded(tmp_path):
    (tmp_path / "bomb.yaml").write_text("version: v1\n" + _alias_bomb())
    with pytest.raises(ApplyError, match="aliases"):
        read_config_file(str(tmp_path / "bomb.yaml"))
    configmap = {"kind": "ConfigMap", "metadata": {"name": "m"}, "data": {"config.yaml": _alias_bomb()}}
    with pytest.raises(ValueError, match=r"ConfigMap default/m data\['config.yaml'\].*aliases"):
        configs_in_document(configmap)
    result = CliRunner().invoke(cli, ["mig", "validate", "-f", str(tmp_path / "bomb.yaml")])
    assert result.exit_code == 2 and "aliases" in result.output and "Traceback" not in result.output


def test_node_profile_files_are_bounded(tmp_path):
    (tmp_path / "bomb.yaml").write_text("name: x\ngpus: [{model: H100}]\n" + _alias_bomb())
    with pytest.raises(DiscoveryError, match="node profile .*aliases"):
        node_profile(str(tmp_path / "bomb.yaml"))


def test_the_local_clusters_config_is_bounded(tmp_path):
    (tmp_path / "cluster.yaml").write_text("nodes: []\n" + _alias_bomb())
    with pytest.raises(ClusterSetupError, match="cluster config .*aliases"):
        ClusterDir(str(tmp_path)).load_config()
    (tmp_path / "cluster.yaml").write_text("nodes: [{name: a}]\n")
    with pytest.raises(ClusterSetupError, match="name and a profile"):
        ClusterDir(str(tmp_path)).load_config()


def test_a_refused_big_claim_is_not_kept_in_memory(tmp_path):
    """A claim with a 4 MB opaque config (no API server stores it) is refused by name, and the store keeps
    nothing of it: what the process holds afterwards is far below the claim's size (before: all of it)."""
    big = allocated_claim("big", [{"request": "gpu", "device": "gpu-0"}], config=[{
        "requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {"pad": "x" * (4 << 20)}}}])
    small = allocated_claim("small", [{"request": "gpu", "device": "gpu-1"}])
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump_all([big, small]))
    store = LocalClaimStore(str(tmp_path))
    tracemalloc.start()
    try:
        with pytest.raises(ClaimSourceError, match=f"claim default/big .* larger than any API server stores "
                                                   f"\\({MAX_CLAIM_BYTES} bytes\\)"):
            store.get("default", "big")
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < (1 << 20)
    assert store.get("default", "small")["metadata"]["name"] == "small"  # the rest of the file still serves


_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
            | st.sampled_from(["yes", "0o17", "1_000", "2020-01-01", "~", ".inf", "<<", "=", "0x1F", "1e3"]))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                             | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=3),
                             max_leaves=12), min_size=1, max_size=3),
       st.booleans())
def test_the_reader_builds_what_pyyamls_safe_loader_builds(docs, flow):
    """PyYAML's own safe loader is the reference (the dumper quotes date-like strings, so timestamps, which the
    bounded reader keeps as strings, do not occur); null documents are left out, as the manifest loader does."""
    text = yaml.safe_dump_all(docs, default_flow_style=flow)
    assert load_yaml_documents(text, "t.yaml") == [doc for doc in yaml.safe_load_all(text) if doc is not None]


@pytest.mark.parametrize("text,expected", [
    ("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n", [{"base": {"x": 1}, "d": {"x": 1, "y": 2}}]),  # merge key
    ("---\na: &x {k: [1, 2]}\nb: *x\n---\n- !!str 12\n- !!binary aGVsbG8=\n- 2020-01-02T03:04:05Z\n",
     [{"a": {"k": [1, 2]}, "b": {"k": [1, 2]}}, ["12", b"hello", "2020-01-02T03:04:05Z"]]),
    ("", []),
])
def test_the_reader_handles_tags_aliases_and_merges(text, expected):
    assert load_yaml_documents(text, "t.yaml") == expected


@pytest.mark.parametrize("text,message", [
    ("a: !!python/object:os.system x\n", "could not determine a constructor"),
    ("{? [a] : b}\n", "mapping key must be a scalar"),
    ("a: [\n", "invalid YAML"),
    ("a: b\na: c\n", "mapping key 'a' already defined"),
    ("a: &a [*a]\n", "an alias refers to a node that contains it"),
])
def test_the_reader_refuses_with_a_line(text, message):
    with pytest.raises(LoadError, match=message) as caught:
        load_yaml_documents(text, "t.yaml")
    assert str(caught.value).startswith("t.yaml:")


def test_one_document_expected(tmp_path):
    (tmp_path / "two.yaml").write_text("a: 1\n---\nb: 2\n")
    with pytest.raises(LoadError, match=r"two.yaml.*: holds more than one YAML document \(document 2\)"):
        read_yaml(str(tmp_path / "two.yaml"))
    assert load_yaml("# nothing\n", "x") is None
    assert json.loads(json.dumps(load_yaml("a: [1, {b: c}]\n", "x"))) == {"a": [1, {"b": "c"}]}
