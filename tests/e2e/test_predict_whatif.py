"""`orch predict`'s what-ifs (study E): past a profile's node cap, another NVLink domain size, the
ViT presets and the H200/B200 systems, and the example that regenerates the talk's figure shapes."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, run_orch


def predict_json(workdir: Path, *args: str) -> dict:
    return json.loads(run_orch("predict", *args, "--json", cwd=workdir, check=True).stdout)


def test_past_the_node_cap_only_as_a_labelled_what_if(workdir: Path) -> None:
    base = ["--model", "gpt3-175b", "--site", "dgx:b200", "--devices", "16384"]
    refused = run_orch("predict", *base, cwd=workdir)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "has at most 64" in refused.stderr and "--what-if-nodes 2048" in refused.stderr
    out = predict_json(workdir, *base, "--what-if-nodes", "2048")
    assert out["what_if"] == {"what_if": True, "nodes": 2048, "profile_max_nodes": 8, "nvlink_domain": None,
                              "profile_nvlink_domain": 8}
    assert out["devices"] == 16384 and all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == 16384 for r in out["layouts"])
    table = run_orch("predict", *base, "--what-if-nodes", "2048", "--top", "1", cwd=workdir, check=True).stdout
    assert table.startswith("WHAT-IF, not the site as profiled: 2048 nodes (the profile has at most 8)")
    too_few = run_orch("predict", *base, "--what-if-nodes", "1024", cwd=workdir)
    assert too_few.returncode == 2 and "--what-if-nodes 1024 holds at most 8192" in too_few.stderr
    plain = predict_json(workdir, "--model", "gpt3-175b", "--site", "dgx:b200", "--devices", "64")
    assert plain["what_if"] is None
    assert "WHAT-IF" not in run_orch("predict", "--model", "gpt3-175b", "--site", "dgx:b200", "--devices", "64",
                                     "--top", "1", cwd=workdir, check=True).stdout


def test_a_larger_nvlink_domain_speeds_up_layouts_that_span_nodes(workdir: Path) -> None:
    base = ["--model", "gpt3-175b", "--site", "dgx:h200", "--devices", "64", "--batch-size", "1"]
    by_domain = {d: {r["layout"]: r for r in predict_json(workdir, *base, "--nvlink-domain", str(d))["layouts"]}
                 for d in (4, 8, 64)}
    assert predict_json(workdir, *base, "--nvlink-domain", "64")["what_if"]["nvlink_domain"] == 64
    # tp16 spans two 8-GPU nodes: over NVLink only in a domain of 64.
    wide = next(name for name, r in by_domain[8].items() if r["tp"] == 16 and not r["tp2d"])
    assert by_domain[64][wide]["tp_comm_s"] < by_domain[8][wide]["tp_comm_s"]
    # tp8 inside one node: a domain of 4 sends it over the NICs, one of 64 changes nothing.
    node = next(name for name, r in by_domain[8].items() if r["tp"] == 8 and not r["tp2d"])
    assert by_domain[4][node]["tp_comm_s"] > by_domain[8][node]["tp_comm_s"] == by_domain[64][node]["tp_comm_s"]
    bad = run_orch("predict", *base, "--nvlink-domain", "0", cwd=workdir)
    assert bad.returncode == 2 and "--nvlink-domain 0: expected a whole number >= 1" in bad.stderr


def test_vit_presets_and_the_h200_b200_systems(workdir: Path) -> None:
    vit = predict_json(workdir, "--model", "vit-large", "--site", "dgx:h200", "--devices", "8")
    assert vit["shape"] == {"layers": 24, "hidden": 1024, "heads": 16, "vocab": 768, "seq": 197,
                            "workload_preset": False}
    assert vit["device"] == "H200-SXM-141GB" and vit["memory_gb_per_device"] == 141
    huge = predict_json(workdir, "--model", "vit-22b", "--site", "dgx:b200", "--devices", "64")
    assert huge["shape"]["seq"] == 257 and huge["shape"]["vocab"] == 588 and huge["device"] == "B200-180GB"
    # Same layout, same model: the B200's peaks make every layout's compute shorter than the H200's (the
    # NICs are the same, so less of a data-parallel reduction hides under it), and the best step too.
    h200 = predict_json(workdir, "--model", "vit-22b", "--site", "dgx:h200", "--devices", "64")["layouts"]
    compute = {r["layout"]: r["breakdown"]["compute"] for r in h200}
    assert all(r["breakdown"]["compute"] < compute[r["layout"]] for r in huge["layouts"])
    assert huge["layouts"][0]["step_s"] < h200[0]["step_s"]


def test_the_example_regenerates_the_figure_shapes(workdir: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([str(REPO / "examples" / "E1-scaling-whatif.sh"), "--quick", "--no-figures", "--out",
                           str(workdir / "e")], capture_output=True, text=True, env=env, cwd=workdir, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(open(workdir / "e" / "study_e.csv", encoding="utf-8")))
    assert {r["figure"] for r in rows} == {"scaling", "nvlink", "parallelism"}
    scaling = [r for r in rows if r["figure"] == "scaling"]
    assert {r["system"] for r in scaling} == {"A100", "H200", "B200"}
    assert {(r["gpus"], r["what_if"]) for r in scaling} == {("64", "no"), ("16384", "yes")}
    assert all(r["fits"] == "yes" and float(r["step_s"]) > 0 for r in rows)
    nvlink = {r["nvlink_domain"]: r for r in rows if r["figure"] == "nvlink"}
    assert set(nvlink) == {"8", "64"} and {r["gpus"] for r in nvlink.values()} == {"1024"}
    assert all(r["what_if"] == "yes" for r in nvlink.values())  # 1024 GPUs: past the profile's 8 nodes
    assert float(nvlink["64"]["step_s"]) <= float(nvlink["8"]["step_s"])
