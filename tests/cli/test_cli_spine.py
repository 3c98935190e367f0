"""The CLI spine (gpudra.cli.errors, output, options, inputs): one error style, one exit-code mapping,
one -o vocabulary, one input policy, quiet broken pipes, colour on terminals only, finite request timeouts."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cli import errors as cli_errors
from gpudra.cli.options import parse_duration
from gpudra.cli.output import OutputFormat, render_objects, render_table, resolve_format

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gpudra(*args: str, stdin: str | None = None, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpudra", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=timeout)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- errors: one style, one mapping -------------------------------------------------------------------


def test_location_has_the_documented_shape() -> None:
    assert cli_errors.location("a.yaml", 2, "ResourceClaim", "gpu", "spec.devices") == \
        "a.yaml:doc 2 (ResourceClaim/gpu): spec.devices"
    assert cli_errors.location("a.yaml") == "a.yaml"
    assert cli_errors.location() == ""


@pytest.mark.parametrize("error_class, code", [
    (cli_errors.UsageError, 2), (cli_errors.InputError, 2), (cli_errors.NegativeAnswer, 1),
    (cli_errors.InvalidInput, 1)])
def test_each_error_class_carries_its_exit_code(error_class: type[cli_errors.GpudraError], code: int) -> None:
    @click.command()
    def boom() -> None:
        raise error_class("it went wrong", source="f.yaml", doc=1, kind="Pod", name="p", field="spec")

    group = click.Group(commands={"boom": boom})
    from gpudra.cli import run_with_error_contract

    stderr = io.StringIO()
    old = sys.stderr
    sys.stderr = stderr
    try:
        with pytest.raises(SystemExit) as exit_info:
            run_with_error_contract(lambda: group.main(["boom"], standalone_mode=False))
    finally:
        sys.stderr = old
    assert exit_info.value.code == code
    assert stderr.getvalue() == "error: f.yaml:doc 1 (Pod/p): spec: it went wrong\n"


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert cli_errors.use_colour(_Tty())
    assert not cli_errors.use_colour(io.StringIO())
    assert "\x1b[" in cli_errors.paint("error:", _Tty(), fg="red")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not cli_errors.use_colour(_Tty())
    assert cli_errors.paint("error:", _Tty(), fg="red") == "error:"


def test_usage_errors_use_the_one_prefix_and_exit_2() -> None:
    result = CliRunner().invoke(cli, ["validate", "--no-such-option"])
    assert result.exit_code == 2
    assert "error: No such option '--no-such-option'" in result.output
    assert "Error:" not in result.output


def test_click_parameter_errors_also_exit_2_in_the_same_style() -> None:
    result = gpudra("allocate", "-f", "examples/cluster", "--mode", "bogus")
    assert result.returncode == 2
    assert "error: Invalid value for '--mode'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_closed_pipe_ends_quietly() -> None:
    """`gpudra … | head -1`: the reader goes away; no BrokenPipeError, no "internal error", and not exit 1
    (which would mean "the answer is no") but 141, what a shell reports for a process ended by SIGPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write
    try:
        result = subprocess.run([sys.executable, "-m", "gpudra", "driver", "slices", "--backend", "simulated", "--node-name", "n",
                                 "--dynamic-mig", "-o", "json"], cwd=ROOT, stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == cli_errors.BROKEN_PIPE


def test_the_shell_pipeline_to_head_is_quiet() -> None:
    result = subprocess.run("set -o pipefail; python -m gpudra driver slices --backend simulated --node-name n --dynamic-mig "
                            "-o yaml | head -1", shell=True, executable="/bin/bash", cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout == "apiVersion: v1\n" or result.stdout.startswith(("apiVersion", "---", "items"))
    assert result.stderr == ""


def test_bugs_are_one_line_not_a_traceback() -> None:
    from gpudra.cli import run_with_error_contract

    def broken() -> None:
        raise RuntimeError("a bug")

    stderr = io.StringIO()
    old = sys.stderr
    sys.stderr = stderr
    env_debug = os.environ.pop("GPUDRA_DEBUG", None)
    try:
        with pytest.raises(SystemExit) as exit_info:
            run_with_error_contract(broken)
    finally:
        sys.stderr = old
        if env_debug is not None:
            os.environ["GPUDRA_DEBUG"] = env_debug
    assert exit_info.value.code == 2
    assert stderr.getvalue().startswith("error: internal error (RuntimeError: a bug); please report it")
    assert stderr.getvalue().count("\n") == 1


# --- output ----------------------------------------------------------------------------------------------


def test_output_format_accepts_the_old_text_spelling_as_table() -> None:
    assert OutputFormat(["table", "wide", "yaml", "json"]).convert("text", None, None) == "table"
    with pytest.raises(click.BadParameter):
        OutputFormat(["table", "wide", "yaml", "json"]).convert("csv", None, None)


def test_table_is_the_default_on_a_terminal_and_the_pipe_default_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", _Tty())
    assert resolve_format(None, "yaml") == "table"
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert resolve_format(None, "yaml") == "yaml"
    assert resolve_format(None) == "table"
    assert resolve_format("json", "yaml") == "json"


def test_json_of_several_objects_is_a_list_with_items() -> None:
    import json

    objects = [{"kind": "A", "metadata": {"name": "a"}}, {"kind": "B", "metadata": {"name": "b"}}]
    body = json.loads(render_objects(objects, "json"))
    assert body["kind"] == "List" and body["apiVersion"] == "v1" and body["items"] == objects
    assert json.loads(render_objects(objects[:1], "json", single=True)) == objects[0]


def test_tables_align_columns_like_kubectl() -> None:
    text = render_table(["NAME", "NODE"], [["a", "node-1"], ["longer-name", "n"]])
    lines = text.splitlines()
    assert lines[0].index("NODE") == lines[1].index("node-1") == lines[2].index("n", len("longer-name"))


# --- options ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [("30", 30.0), ("30s", 30.0), ("1m", 60.0), ("500ms", 0.5),
                                           ("0", None), ("2h", 7200.0)])
def test_request_timeout_reads_kubectl_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-1s", "1d", "1.5.2s"])
def test_request_timeout_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# --- the loader ----------------------------------------------------------------------------------------


GOOD_CLASS = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: gpu\nspec: {}\n"


def _write(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_the_loader_still_reads_the_good_files_next_to_bad_ones(tmp_path) -> None:
    from gpudra.api.load import LoadErrors, load_paths

    _write(tmp_path / "a.yaml", GOOD_CLASS)
    _write(tmp_path / "b.yaml", "{{ include \"x\" . }}\n")
    with pytest.raises(LoadErrors) as info:
        load_paths([str(tmp_path)])
    assert [document.obj["metadata"]["name"] for document in info.value.documents] == ["gpu"]
    assert len(info.value.errors) == 1 and info.value.errors[0].source.endswith("b.yaml")


def test_an_empty_list_from_kubectl_is_not_an_unreadable_file(tmp_path) -> None:
    from gpudra.api.load import load_paths

    path = _write(tmp_path / "none.yaml", "apiVersion: v1\nkind: List\nitems: []\n")
    assert load_paths([path, _write(tmp_path / "class.yaml", GOOD_CLASS)])[0].obj["kind"] == "DeviceClass"
