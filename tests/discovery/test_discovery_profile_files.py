"""gpudra discover with a node profile file: a malformed one is a clean error, not a traceback."""

import pytest
from click.testing import CliRunner

from gpudra.cli.discover import command as discover_command
from gpudra.discovery.model import DiscoveryError
from gpudra.discovery.profiles import node_profile


@pytest.mark.parametrize("text", [
    "gpus: [{model: A100-40GB, mig: [1g.5gb, 1g.5gb]}]",
    "gpus: [{model: A100-40GB, mig: [{profile: 1g.5gb}]}]",
    "gpus: [{model: A100-40GB, mig: {profile: 1g.5gb, start: 0}}]",
    "gpus: [{model: A100-40GB, mig: [{profile: 1g.5gb, start: x}]}]",
    "gpus: [{model: A100-40GB, count: x}]",
    "gpus: [{model: A100-40GB, numaNode: x}]",
])
def test_malformed_profile_entries_are_discovery_errors(tmp_path, text):
    path = tmp_path / "node.yaml"
    path.write_text(text + "\n")
    with pytest.raises(DiscoveryError) as error:
        node_profile(str(path))
    assert "node.yaml" in str(error.value)
    result = CliRunner().invoke(discover_command, ["--profile", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_well_formed_profile_still_loads(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("gpus: [{model: A100-40GB, count: 2, numaNode: 1, mig: [{profile: 1g.5gb, start: 0}]}]\n")
    profile = node_profile(str(path))
    assert len(profile.gpus) == 2 and profile.gpus[0].mig == (("1g.5gb", 0),) and profile.gpus[1].numa_node == 1
