"""Every study example reproduces the setup its study states (issue 47).

The setups are ``shared/reference/study-setups.yaml`` (beside the repository: ../shared/reference/,
where CI has it too): per experiment and per system, the models, batch sizes, accumulation,
precisions, strategies and device counts each study states it ran. Each experiment of a study
example (examples/[A-D][0-9]-*.yaml) names the entry it reproduces (``setup: {id, system}``, a
typed field of the sweep), and this test compares the experiment's full-size grid (no variant)
with that entry, field by field. A value the example does not plan is in the example's
``not_planned:`` list with its reason; docs/studies.md's Missing column names it
(tests/unit/test_studies_doc.py). A study value written as prose ("varied", "up to 2k") or not
stated is not compared: only values that read as numbers, ranges, precisions, strategies or model
names are.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.plan.sweep import Experiment, SetupRef, Sweep
from tests.conftest import REPO
from workloads import registry
from workloads.models.configs import SIZES

# ../shared/reference/ of the checkout (a worktree under wt/ finds it one level further up).
SETUPS = next((d / "shared" / "reference" / "study-setups.yaml" for d in REPO.parents
               if (d / "shared" / "reference" / "study-setups.yaml").is_file()),
              REPO.parent / "shared" / "reference" / "study-setups.yaml")
EXAMPLES = sorted((REPO / "examples").glob("[A-D][0-9]-*.yaml")) + sorted((REPO / "examples").glob("A-fig*.yaml"))
LM_WORKLOADS = ("gpt2", "genslm")

# The studies' model names as orch's presets (workloads/models/configs.py), most specific first.
MODEL_NAMES: tuple[tuple[str, str], ...] = (
    (r"GPT-3 XL", "gpt3-xl"), (r"GPT-3 6\.7B", "gpt3-6.7b"), (r"GPT-3 30B", "gpt3-30b"),
    (r"GPT-2 XL", "gpt2-xl"), (r"GPT-2 13B|^13B$", "gpt-13b"), (r"^25B$", "gpt-25b"),
    (r"^MPT-7B$", "mpt-7b"), (r"^gpt2 \(85\.21M\)$|85\.3 million", "gpt2"),
    (r"^(gpt2(-medium|-large|-xl|-xxl|-xxxl)?)$", r"\1"),
)


@dataclass(frozen=True)
class Span:
    """A range the study gives by its ends ("16 to 2048"; Table II's minimum and maximum)."""

    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.low:g} to {self.high:g}"


Study = frozenset[Any] | Span


def load_setups(path: Path = SETUPS) -> dict[str, dict[str, Any]]:
    assert path.is_file(), f"{path}: the studies' setups are not beside the repository (../shared/reference/)"
    return {entry["id"]: entry for entry in yaml.safe_load(path.read_text())["experiments"]}


def _stated(value: Any) -> Any:
    """A plain value, or a value map's value if stated; None where the study does not say."""
    if isinstance(value, dict) and "value" in value:
        return value["value"] if value.get("stated", True) else None
    return value


def _flat(part: dict[str, Any]) -> dict[str, Any]:
    """An entry's settings in one layer: its top level, then training, inference, model,
    parallelism and grid (later wins); a model map gives its name and sequence length."""
    out: dict[str, Any] = {k: v for k, v in part.items() if k not in ("per_system", "source")}
    for section in ("training", "inference", "parallelism", "grid"):
        if isinstance(part.get(section), dict) and "value" not in part[section]:
            out.update(part[section])
    model = part.get("model")
    if isinstance(model, dict) and "value" not in model:
        out["model"] = model.get("name") or model.get("names")
        if "sequence_length" in model:
            out["sequence_length"] = model["sequence_length"]
    return out


def _row_matches(row: dict[str, Any], system: str) -> bool:
    text = " ".join(str(row.get(key, "")) for key in ("system", "model", "sweep"))
    return all(word in text for word in system.split())


def resolve(setups: dict[str, dict[str, Any]], ref: SetupRef) -> dict[str, Any]:
    """The settings of ``ref``: its base's (and the base's row for the system), then its own
    (and its own row): an entry's values win over its base's."""
    chain, entry = [], setups[ref.id]
    while True:
        chain.append(entry)
        if "base" not in entry:
            break
        entry = setups[entry["base"]]
    values: dict[str, Any] = {}
    for part in reversed(chain):
        values.update(_flat(part))
        rows = [row for row in part.get("per_system", []) if ref.system and _row_matches(row, ref.system)]
        assert len(rows) <= 1, f"{part['id']}: system {ref.system!r} matches {len(rows)} per_system rows"
        if rows:
            values.update(_flat(rows[0]))
    if ref.system and not any(_row_matches(row, ref.system) for part in chain for row in part.get("per_system", [])):
        raise AssertionError(f"{ref.id}: no per_system row matches system {ref.system!r}")
    devices = values.get("devices")
    if ref.system and isinstance(devices, list) and devices and isinstance(devices[0], dict):
        match = [d for d in devices if all(w in str(d.get("system")) for w in ref.system.split())]  # Table II
        values["devices"] = Span(match[0]["min"], match[0]["max"]) if len(match) == 1 else None
    return values


def _numbers(value: Any, kind: type = int) -> Study | None:
    value = _stated(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return frozenset({kind(value)})
    if isinstance(value, list):
        parts = [_numbers(item, kind) for item in value]
        if any(not isinstance(p, frozenset) for p in parts):
            return None
        return frozenset().union(*parts)  # type: ignore[arg-type]
    text = str(value).strip()
    span = re.fullmatch(r"(\d+) to (\d+)", text)
    if span:
        return Span(int(span.group(1)), int(span.group(2)))
    # "16 per instance", "112 on a single CS-2 engine", "1024 (Fig. 5 caption ...)"; not "8 RDUs, 8 ..."
    number = re.fullmatch(r"(\d+(?:\.\d+)?)(?: [A-Za-z][\w-]*)*(?: \(.*\))?", text)
    return frozenset({kind(float(number.group(1)))}) if number else None


def _precisions(value: Any) -> Study | None:
    value = _stated(value)
    items = value if isinstance(value, list) else [value]
    found: list[str] = []
    for item in items:
        tokens = set(re.findall(r"\b(fp32|fp16|bf16|tf32|fp8)\b", str(item).lower()))
        if len(tokens) != 1 or item is None:
            return None  # prose ("mixed precision, opt level 1"), or two precisions in one cell
        found += tokens
    return frozenset(found)


def _strategy(text: Any) -> str | None:
    text = str(_stated(text) or "")
    stage = re.search(r"(?:ZeRO|zero)\D{0,12}(\d)", text)
    if stage:
        return f"zero{stage.group(1)}"
    if "FSDP" in text:  # FULL_SHARD is FSDP's (and Lightning's) default sharding
        return "fsdp-grad-op" if "SHARD_GRAD_OP" in text else "fsdp-full"
    return "ddp" if re.fullmatch(r"DDP(\s*\(.*\))?", text.strip()) else None


def _strategies(values: dict[str, Any]) -> Study | None:
    if _stated(values.get("zero_stage")) is not None:
        return frozenset({f"zero{values['zero_stage']}"})
    given = _stated(values.get("strategies")) or _stated(values.get("strategy"))
    items = given if isinstance(given, list) else [given]
    found = [_strategy(item) for item in items if item is not None]
    return frozenset(found) if found and None not in found else None  # type: ignore[arg-type]


def _shape_preset(shape: Any) -> str | None:
    """The preset with the shape the study gives (layers, width and heads where stated)."""
    if not isinstance(shape, dict) or "layers" not in shape:
        return None
    width, heads = shape.get("hidden") or shape.get("embedding"), shape.get("heads")
    found = [name for name, cfg in SIZES.items() if (cfg.n_layer, cfg.n_embd) == (shape["layers"], width)
             and heads in (None, cfg.n_head)]
    return found[0] if len(found) == 1 else None


def _models(values: dict[str, Any]) -> Study | None:
    by_shape = _shape_preset(values.get("shape"))
    if by_shape:
        return frozenset({by_shape})
    given = _stated(values.get("models")) or _stated(values.get("model"))
    items = given if isinstance(given, list) else [given]
    found = []
    for item in items:
        name = str(item or "").strip()
        preset = next((re.sub(pattern, repl, name) if repl.startswith("\\") else repl
                       for pattern, repl in MODEL_NAMES if re.search(pattern, name)), None)
        if preset is None:
            return None
        found.append(preset)
    return frozenset(found) if found else None


def study_values(values: dict[str, Any]) -> dict[str, Study]:
    """The mapped fields of a resolved setup entry, as orch's grid names them."""
    batch = next((values[k] for k in ("micro_batch", "local_batch", "batch_per_gpu", "batch") if
                  _stated(values.get(k)) is not None), None)
    out: dict[str, Study | None] = {
        "model": _models(values),
        "batch_size": _numbers(batch),
        "global_batch": _numbers(values.get("global_batch")),
        "grad_accum": _numbers(values.get("gradient_accumulation")),
        "seq_len": _numbers(values.get("sequence_length")),
        "devices": values["devices"] if isinstance(values.get("devices"), Span) else _numbers(values.get("devices")),
        "precision": _precisions(values.get("precision")),
        "strategy": _strategies(values),
        "sparsity": _numbers(values.get("sparsity"), float),
    }
    return {field: value for field, value in out.items() if value is not None}


def runs(exp: Experiment, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The experiment's combinations of ``keys`` (grid product times its zip groups), each key
    the experiment does not set at the workload's default."""
    defaults = {**registry.get(exp.workload).defaults(), **registry.get(exp.workload).axis_defaults}
    axes: list[list[dict[str, Any]]] = []
    for key in keys:
        if key in exp.grid:
            given = exp.grid[key]
            axes.append([{key: v} for v in (given if isinstance(given, list) else [given])])
    for group in exp.zip.values():
        picked = {k: v for k, v in group.items() if k in keys}
        if picked:
            axes.append([dict(zip(picked, row)) for row in zip(*picked.values())])
    combos = [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*axes)]
    return [{key: combo.get(key, defaults.get(key)) for key in keys} for combo in combos]


def example_values(exp: Experiment, field: str) -> frozenset[Any]:
    if field == "global_batch":
        return frozenset(r["batch_size"] * r["devices"] * r["grad_accum"]
                         for r in runs(exp, ("batch_size", "devices", "grad_accum")))
    return frozenset(r[field] for r in runs(exp, (field,)))


def _differs(study: Study, mine: frozenset[Any]) -> bool:
    if isinstance(study, Span):
        return not mine or (min(mine), max(mine)) != (study.low, study.high)
    return set(study) != set(mine)


def _show(values: Study) -> str:
    if isinstance(values, Span):
        return str(values)
    try:
        ordered = sorted(values)  # numbers in their order
    except TypeError:
        ordered = sorted(values, key=str)
    return ", ".join(str(v) for v in ordered)


def differences(name: str, sweep: Sweep, setups: dict[str, dict[str, Any]]) -> list[str]:
    """Each mapped field where the experiments reproducing one setup entry (one per_system row)
    differ from it, together, and the example does not list it as not planned:
    "example: experiment X (setup): field: study ..., example ...". Several experiments may share
    a row (a system's counts split over two sites): their values are taken together."""
    problems = []
    groups: dict[tuple[str, str | None], list[Experiment]] = {}
    for exp in sweep.experiments:
        if exp.setup is None:
            problems.append(f"{name}: experiment {exp.name}: names no setup (setup: {{id: ..., system: ...}})")
        elif exp.setup.id not in setups:
            problems.append(f"{name}: experiment {exp.name}: setup {exp.setup.id} is not in study-setups.yaml")
        else:
            groups.setdefault((exp.setup.id, exp.setup.system), []).append(exp)
    for (setup, system), exps in groups.items():
        label = f"experiment{'s' if len(exps) > 1 else ''} {', '.join(e.name for e in exps)} " \
                f"({setup}{' ' + system if system else ''})"
        waived = {item.field for item in sweep.not_planned if item.setup == setup and item.system in (None, system)}
        for field, study in study_values(resolve(setups, SetupRef(id=setup, system=system))).items():
            if field == "model" and any(e.workload not in LM_WORKLOADS for e in exps):
                continue  # the other workloads name sizes, not the study's models
            mine = frozenset().union(*(example_values(e, field) for e in exps))
            if field in waived:
                if not _differs(study, mine):
                    problems.append(f"{name}: {label}: {field} is listed as not planned "
                                    f"but the example plans the study's {_show(study)}")
            elif _differs(study, mine):
                problems.append(f"{name}: {label}: {field}: study {_show(study)}, example {_show(mine)}")
    return problems


def load_example(path: Path) -> Sweep:
    return Sweep.model_validate(yaml.safe_load(path.read_text()))


@pytest.fixture(scope="module")
def setups() -> dict[str, dict[str, Any]]:
    return load_setups()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_follows_its_study_setup(path: Path, setups: dict[str, dict[str, Any]]) -> None:
    problems = differences(path.name, load_example(path), setups)
    assert not problems, "\n".join(problems)


# Setup entries no sweep reproduces by its own experiment, and where they are instead.
COVERED_ELSEWHERE = {
    "000-W2": "the base of 000-E3 .. 000-E10: A2 names its per-system rows through 000-E3",
    "001-E3": "B2-ddp-scaling.yaml: its runs record peak memory per batch (001-E3's base is 001-E2)",
    "003-T8": "D2-perf-per-dollar.yaml: 003-T1's runs priced (the `cost` view)",
    "003-T9": "FP8 training is not part of the study",
    "004-M1": "examples/E1-scaling-whatif.sh: orch predict's time model (no sweep)",
    "004-M10": "examples/E1-scaling-whatif.sh: GPT-3 1T and ViT presets",
    "004-M11": "examples/E1-scaling-whatif.sh: A100/H200/B200 and NVLink domains 4/8/64",
    "004-M12": "examples/E1-scaling-whatif.sh: the TP and PP sweeps (tp_sweep, pp_sweep)",
    "004-M13": "examples/E1-scaling-whatif.sh: the best layout per point (parallelism)",
    "004-M2": "the talk states no memory model",
    "004-M15": "the talk's Megatron-LM validation runs are not in orch's references (docs/studies.md E.2)",
    "004-M16": "a time-to-train configuration whose result the setups leave out",
    "004-M18": "a description of regimes, not a run",
}


def test_every_setup_entry_is_planned_listed_or_accounted_for(setups: dict[str, dict[str, Any]]) -> None:
    """Each experiment of the setups is reproduced by an example's experiment, or listed in an
    example's not_planned with its reason, or accounted for above."""
    named: set[str] = set()
    for path in EXAMPLES:
        sweep = load_example(path)
        named |= {exp.setup.id for exp in sweep.experiments if exp.setup}
        for item in sweep.not_planned:
            assert item.setup in setups, (path.name, item.setup)
            named.add(item.setup)
    assert set(COVERED_ELSEWHERE) <= set(setups), set(COVERED_ELSEWHERE) - set(setups)
    missing = [entry for entry in setups if entry not in named and entry not in COVERED_ELSEWHERE]
    assert not missing, missing


def test_one_changed_value_fails_naming_example_experiment_field_and_values(
        setups: dict[str, dict[str, Any]]) -> None:
    path = REPO / "examples" / "A4-grad-accumulation.yaml"
    data = yaml.safe_load(path.read_text())
    assert differences(path.name, Sweep.model_validate(data), setups) == []
    exp = data["experiments"][0]
    exp["grid"]["seq_len"] = 2048  # the study: 1024
    problems = differences(path.name, Sweep.model_validate(data), setups)
    assert problems == [f"A4-grad-accumulation.yaml: experiment {exp['name']} ({exp['setup']['id']} "
                        f"{exp['setup']['system']}): seq_len: study 1024, example 2048"]
    del exp["setup"]
    assert "names no setup" in differences(path.name, Sweep.model_validate(data), setups)[0]


def test_the_reader_keeps_prose_out_and_reads_stated_values() -> None:
    assert _numbers({"value": None, "stated": False}) is None
    assert _numbers("varied") is None and _numbers("up to 2k") is None
    assert _numbers({"value": "16 to 2048", "stated": True}) == Span(16, 2048)
    assert _numbers([16, 32]) == frozenset({16, 32})
    assert _precisions("bf16 mixed precision") == frozenset({"bf16"})
    assert _precisions("mixed precision, precision opt level 1 (default) and 2") is None
    assert _strategy("PyTorch FSDP, sharding_strategy: FULL_SHARD") == "fsdp-full"
    assert _strategy("DeepSpeed ZeRO, stage: 3 (the blog expects FSDP support on Gaudi later)") == "zero3"
    assert _models({"model": "1.5B, a GPT-3 XL"}) == frozenset({"gpt3-xl"})
    assert _models({"models": ["GPT-2 XL", "GPT-3 6.7B"]}) == frozenset({"gpt2-xl", "gpt3-6.7b"})
