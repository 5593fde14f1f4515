"""Planning many runs at once gives exactly what planning each run alone gives.

A plan shares each site's resolver and its part of the script between runs (see
render.ScriptRenderer): every script must be the text one run alone renders, values that
need shell quoting are quoted in each run, and ids and spec files are json's own text.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict
from pathlib import Path

import pytest

from orchestrator.plan.expand import RunSpec
from orchestrator.plan.record import PlannedRun, plan_sweep, spec_json
from orchestrator.plan.render import RenderError, RunFiles, ScriptRenderer, environment, render_script
from orchestrator.plan.resolve import Resolved, SiteResolver, resolve
from orchestrator.plan.sweep import parse_sweep
from orchestrator.sites.profiles import SiteProfile, available_sites, load_site
from tests.conftest import write

ENV = {"ORCH_ACCOUNT": "proj1", "ORCH_QOS": "normal"}


def spec(target: str, devices: int, precision: str, repeat: int = 0, params: tuple = (), walltime_s: int = 1800,
         workload: str = "gemm", strategy: str | None = None) -> RunSpec:
    site, _, system = target.partition(":")
    return RunSpec(sweep="many", experiment="e", workload=workload, site=site, system=system or None,
                   devices=devices, precision=precision, strategy=strategy, batch_size=None, seq_len=None,
                   repeat=repeat, params=params or (("k", 256), ("m", 512), ("n", 128)), walltime_s=walltime_s)


def targets() -> list[str]:
    out = []
    for name in available_sites():
        out.append(name)
        out += [f"{name}:{system}" for system in load_site(name).systems]
    return out


def runs_on(site: SiteProfile, target: str) -> list[Resolved]:
    per_node = site.device.per_node
    resolver = SiteResolver(site, ENV, site.python or "python3")
    out = []
    for devices in sorted({1, 2, per_node, 2 * per_node, 4 * per_node}):
        for precision in site.device.precisions:
            for repeat in range(2):
                for walltime_s in (600, 7200):
                    out.append(resolver.resolve(spec(target, devices, precision, repeat, walltime_s=walltime_s)))
    return out


@pytest.mark.parametrize("target", targets())
def test_every_site_resolves_and_renders_each_run_as_alone(target: str, tmp_path: Path) -> None:
    """One resolver and one renderer for many runs (what they share between runs) give what each
    run resolved and rendered alone gives."""
    site = load_site(target)
    renderer = ScriptRenderer()
    for resolved in runs_on(site, target):
        assert resolved == resolve(resolved.spec, site, ENV, site.python or "python3")  # one resolver = one call
        if not resolved.skipped:
            files = RunFiles(tmp_path / "runs" / resolved.spec.id)
            assert renderer.render(resolved, files) == render_script(resolved, files, environment())


def test_values_that_need_quoting_are_quoted_in_each_run(tmp_path: Path) -> None:
    site = load_site("local")
    renderer = ScriptRenderer()
    resolver = SiteResolver(site, {}, "python3")
    texts = []
    for tag in ("plain", "it's $(touch /tmp/pwned)", "semi;colon", "new\nline", "plain2"):
        resolved = resolver.resolve(spec("local", 1, "fp32", params=(("m", 64), ("tag", tag))))
        run_dir = str(tmp_path / "a dir with 'quotes'" / resolved.spec.id)
        text = renderer.render(resolved, RunFiles(Path(run_dir)))
        assert text == render_script(resolved, RunFiles(Path(run_dir)), renderer.env)
        texts.append(text)
    assert "'it'\"'\"'s $(touch /tmp/pwned)'" in texts[1] and "'semi;colon'" in texts[2]


def test_a_value_a_directive_refuses_is_the_same_error(tmp_path: Path) -> None:
    site = load_site("sandbox")
    resolved = SiteResolver(site, ENV, "python3").resolve(spec("sandbox", 1, site.device.precisions[0]))
    renderer = ScriptRenderer()
    renderer.render(resolved, RunFiles(tmp_path / "runs" / resolved.spec.id))
    with pytest.raises(RenderError, match="cannot go in a scheduler directive"):
        renderer.render(resolved, RunFiles(tmp_path / "a space" / resolved.spec.id))
    with pytest.raises(RenderError, match="cannot go in a scheduler directive"):
        render_script(resolved, RunFiles(tmp_path / "a space" / resolved.spec.id))


ODD_VALUES = [None, 0, -3, 2**70, 1.5, 1e300, -0.0, float("inf"), float("nan"), True, False, "x", "é ü 日本",
              'quote"back\\slash', "tab\tnew\nline", [1, "a"], {"b": 1, "a": [2.5]}]


def odd_specs(count: int) -> list[RunSpec]:
    rng = random.Random(7)
    out = []
    for _ in range(count):
        names = sorted(rng.sample(["m", "n", "k", "model", "tag", "lr", "a_b", "Ä"], rng.randint(0, 4)))
        out.append(RunSpec(sweep=rng.choice(["s", "sweep-é"]), experiment="e", workload="gemm", site="local",
                           system=rng.choice([None, "sys"]), devices=rng.choice([1, 8]), precision="fp32",
                           strategy=rng.choice([None, "ddp"]), batch_size=rng.choice([None, 4]),
                           seq_len=rng.choice([None, 128]), repeat=rng.randint(0, 3),
                           params=tuple((n, rng.choice(ODD_VALUES)) for n in names), walltime_s=60,
                           retry_on=rng.choice([(), ("timeout", "lost")])))
    return out


def test_ids_are_the_hash_of_the_canonical_json() -> None:
    for s in odd_specs(3000):
        canonical = json.dumps(s.identity(), sort_keys=True, separators=(",", ":"))
        assert s.id == hashlib.sha256(canonical.encode()).hexdigest()[:16]


def test_spec_json_is_jsons_indented_text(tmp_path: Path) -> None:
    site = load_site("local")
    for s in odd_specs(3000):
        reason = random.Random(s.id).choice([None, "predicted to need 45.1 GB per device, X has 40 GB"])
        plan = PlannedRun(Resolved(s, site, None, reason), str(tmp_path / s.id), None)
        expected = json.dumps({**asdict(s), "params": s.param_dict, "id": s.id, "skip_reason": reason},
                              indent=2, sort_keys=True)
        assert spec_json(plan) == expected


def test_a_plan_is_its_runs_planned_one_by_one(tmp_path: Path) -> None:
    sweep = write(tmp_path / "s.yaml", """\
name: many
experiments:
  - name: g
    workload: gemm
    sites: [local, sandbox, polaris, baskerville, dawn]
    walltime: "00:20:00"
    grid:
      devices: [1, 2, 4, 8]
      precision: [fp32, bf16]
      m: [64, 128]
      tag: [plain, "it's"]
      repeats: 2
""")
    loaded = parse_sweep(sweep)
    plans = plan_sweep(loaded, tmp_path / "runs", env=ENV, python="python3")
    assert len(plans) == 5 * 4 * 2 * 2 * 2 * 2
    sites = {name: load_site(name) for name in ("local", "sandbox", "polaris", "baskerville", "dawn")}
    jinja = environment()
    for p in plans:
        site = sites[p.spec.site]
        alone = resolve(p.spec, site, ENV, site.python or "python3")
        assert p.resolved == alone and p.run_dir == str((tmp_path / "runs" / "many" / p.spec.id).resolve())
        assert p.script == (None if alone.skipped else render_script(alone, p.files, jinja))
