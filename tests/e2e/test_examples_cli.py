"""`gpudra examples`: the bundled manifests are listed, printed and written; they ship in the wheel; each one is
what its description says (valid, or invalid exactly where the article's author went wrong)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli

ROOT = Path(__file__).resolve().parent.parent.parent
NAMES = ["article", "article-fixed", "cluster", "workloads", "mig", "computedomain", "webhook", "trace"]

# The article's mistakes, read off the article itself (examples/k8s-1.34-dra-gpu-article.ko.txt; examples/README.md
# names them): the class name `nvidia.com/gpu`, v1beta1's flat request fields inside resource.k8s.io/v1,
# `device.attributes["memory"]` compared as a quantity, and `constraints: - cel:` inside a request.
ARTICLE_MISTAKES = {
    ("01-deviceclass.yaml", "metadata.name"),
    ("02-resourceclaim-gpu.yaml", "spec.devices.requests[0].deviceClassName"),
    ("02-resourceclaim-gpu.yaml", "spec.devices.requests[0].selectors"),
    ("02-resourceclaim-gpu.yaml", "spec.devices.requests[0].selectors[0].cel.expression"),
    ("03-resourceclaim-nvlink.yaml", "spec.devices.requests[0].deviceClassName"),
    ("03-resourceclaim-nvlink.yaml", "spec.devices.requests[0].allocationMode"),
    ("03-resourceclaim-nvlink.yaml", "spec.devices.requests[0].count"),
    ("03-resourceclaim-nvlink.yaml", "spec.devices.requests[0].constraints"),
    ("03-resourceclaim-nvlink.yaml", "spec.devices.requests[0].constraints[0].cel"),
    ("04-resourceclaimtemplate.yaml", "spec.spec.devices.requests[0].deviceClassName"),
    ("04-resourceclaimtemplate.yaml", "spec.spec.devices.requests[0].allocationMode"),
    ("04-resourceclaimtemplate.yaml", "spec.spec.devices.requests[0].count"),
}


def gpudra(*args: str) -> "object":
    return CliRunner().invoke(cli, list(args))


def test_the_listing_names_every_example_and_its_files() -> None:
    listed = gpudra("examples", "-o", "json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [row["name"] for row in rows] == NAMES
    assert {row["name"]: row["files"] for row in rows}["webhook"] == ["review-allowed.json", "review-refused.json"]
    table = gpudra("examples")
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split()[:2] == ["NAME", "FILES"]


def test_unknown_names_and_contradictory_options_are_usage_errors(tmp_path: Path) -> None:
    for args in (["nosuch"], ["nosuch", "--dir", str(tmp_path)], ["--all"], ["article", "--all", "-d", "x"],
                 ["--dir", str(tmp_path)], ["article", "-o", "json"], ["webhook"]):
        result = gpudra("examples", *args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error: ") and "Traceback" not in result.output, args
    assert list(tmp_path.iterdir()) == []


def test_written_files_are_the_repository_examples_byte_for_byte(tmp_path: Path) -> None:
    written = gpudra("examples", "--all", "--dir", str(tmp_path / "ex"))
    assert written.exit_code == 0, written.output
    for name in NAMES:
        theirs = sorted(p.name for p in (ROOT / "examples" / name).iterdir() if p.suffix in (".yaml", ".json", ".csv"))
        ours = sorted(p.name for p in (tmp_path / "ex" / name).iterdir())
        assert ours == theirs, name
        for file in ours:
            assert (tmp_path / "ex" / name / file).read_bytes() == (ROOT / "examples" / name / file).read_bytes()
    again = gpudra("examples", "--all", "--dir", str(tmp_path / "ex"))  # the same files again: nothing to do
    assert again.exit_code == 0


def test_a_changed_file_is_never_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "fixed"
    assert gpudra("examples", "article-fixed", "-d", str(target)).exit_code == 0
    (target / "05-pod.yaml").write_text("mine\n")
    (target / "01-deviceclass.yaml").unlink()
    result = gpudra("examples", "article-fixed", "-d", str(target))
    assert result.exit_code == 2 and "05-pod.yaml: exists with other content" in result.stderr
    assert (target / "05-pod.yaml").read_text() == "mine\n"
    assert not (target / "01-deviceclass.yaml").exists()  # nothing written, not even the missing file


def test_printing_one_example_gives_its_documents() -> None:
    printed = gpudra("examples", "article-fixed")
    assert printed.exit_code == 0
    kinds = [doc["kind"] for doc in yaml.safe_load_all(printed.stdout) if doc]
    assert kinds.count("Namespace") == 2 and "Deployment" in kinds and kinds[-1] == "Pod"


def _problems(*paths: Path) -> list[dict]:
    result = gpudra("validate", "-o", "json", *[arg for path in paths for arg in ("-f", str(path))])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_every_manifest_validates_except_the_articles_mistakes(tmp_path: Path) -> None:
    assert gpudra("examples", "--all", "--dir", str(tmp_path)).exit_code == 0
    for name in ("article-fixed", "cluster", "workloads", "mig", "computedomain"):
        errors = [p for p in _problems(tmp_path / name) if p["severity"] == "error"]
        assert errors == [], (name, errors)
    found = {(Path(p["source"]).name, p["path"]) for p in _problems(tmp_path / "article") if p["severity"] == "error"}
    assert found == ARTICLE_MISTAKES


def test_the_webhook_reviews_get_the_answers_their_names_say(tmp_path: Path) -> None:
    from gpudra.webhook.admission import review_response

    assert gpudra("examples", "webhook", "--dir", str(tmp_path)).exit_code == 0
    allowed = review_response(json.loads((tmp_path / "review-allowed.json").read_text()))["response"]
    refused = review_response(json.loads((tmp_path / "review-refused.json").read_text()))["response"]
    assert allowed["allowed"] is True
    assert refused["allowed"] is False and "defaultActiveThreadPercentage" in refused["status"]["message"]


def test_the_trace_replays(tmp_path: Path) -> None:
    assert gpudra("examples", "trace", "--dir", str(tmp_path)).exit_code == 0
    result = gpudra("simulate", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                    "--method", "events", "-o", "json")
    assert result.exit_code == 0, result.output


@pytest.mark.skipif(os.environ.get("GPUDRA_SKIP_WHEEL") == "1", reason="building the wheel asked off")
def test_the_wheel_ships_every_example(tmp_path: Path) -> None:
    """The manifests an installed gpudra writes are in the wheel (package data), not only in a clone."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("gpudra-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    from gpudra.demo.examples import EXAMPLES, files

    for example in EXAMPLES:
        for file in files(example):
            assert f"gpudra/demo/data/{example.folder}/{file.name}" in names, (example.name, file.name)
