"""Site profiles: golden scripts per site and template, Polaris queue choice, facts against
hardware.md, clear refusals, and a site added by dropping one YAML file in a user directory.

Golden files live in tests/sites/golden/<site>[:<system>]/<case>.sh. Regenerate them after an
intended change with ``ORCH_UPDATE_GOLDEN=1 pytest tests/sites`` and review the diff.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.plan.expand import RunSpec
from orchestrator.plan.render import RunFiles, render_script
from orchestrator.plan.resolve import Placement, Resolved, resolve
from orchestrator.sites.profiles import SiteProfile, available_sites, load_site
from orchestrator.sites.vendors.base import check_case
from tests.conftest import run_orch, write

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("ORCH_UPDATE_GOLDEN") == "1"
ENV = {"ORCH_ACCOUNT": "myproject", "ORCH_QOS": "myqos",
       # What the profiles' python_env and launcher options read when a plan is made: $HOME (the
       # documented locations of vendor clones and virtual environments) and the environments a user
       # must name where no public page documents one (tests/sites/test_profile_envs.py).
       "HOME": "/home/user", "ORCH_COSMA8_VENV": "/cosma/home/dp000/user/venvs/torch-rocm",
       "ORCH_JADE2_VENV": "/jmain02/home/user/venvs/torch", "ORCH_PERLMUTTER_CONDA_ENV": "torch",
       "ORCH_DGX_VENV": "/home/user/venvs/torch", "ORCH_POD16_VENV": "/home/user/venvs/poptorch",
       "ORCH_POPLAR_SDK": "/opt/graphcore/poplar_sdk-3.3.0"}
BUILTIN = ["alcf-ai-testbed", "baskerville", "cosma8", "dawn", "jade2", "local", "polaris", "stanage",
           "perlmutter", "sophia", "lumi", "dgx", "gaudi2-cluster", "graphcore-pod16"]


def targets() -> list[str]:
    out = []
    for name in BUILTIN:
        out.append(name)
        out += [f"{name}:{system}" for system in load_site(name).systems]
    return out


def spec(target: str, devices: int, precision: str, walltime_s: int = 1800) -> RunSpec:
    site, _, system = target.partition(":")
    # A GEMM; on a system that runs a vendor's own tool (orchestrator/sites/vendors/), a model it runs.
    workload, batch, seq, params = check_case(load_site(target).launcher.name) or (
        "gemm", None, None, (("m", 4096), ("n", 4096), ("k", 4096)))
    return RunSpec(sweep="golden", experiment=workload, workload=workload, site=site, system=system or None,
                   devices=devices, precision=precision, strategy=None, batch_size=batch, seq_len=seq, repeat=0,
                   params=params, walltime_s=walltime_s)


def precision_for(site: SiteProfile) -> str:
    return "bf16" if "bf16" in site.device.precisions else site.device.precisions[0]


def cases(site: SiteProfile) -> dict[str, tuple[int, str | None, int]]:
    """Representative runs: (devices, queue asked for by name, walltime)."""
    per_node = site.device.per_node
    auto = [q for q in site.queues if q.auto] or site.queues
    largest = max(auto, key=lambda q: (q.max_nodes, q.max_devices or math.inf, q.max_walltime_s))
    devices = largest.max_nodes * per_node
    if largest.max_devices is not None:
        devices = min(devices, largest.max_devices)
    return {
        "1-device": (1, None, 1800),
        "1-node": (per_node, None, 1800),
        "2-nodes": (2 * per_node, None, 1800),
        "largest-queue": (devices, largest.name, largest.max_walltime_s),
    }


def resolved(target: str, devices: int, queue: str | None = None, walltime_s: int = 1800,
             env: dict[str, str] | None = None) -> Resolved:
    site = load_site(target)
    return resolve(spec(target, devices, precision_for(site), walltime_s), site, ENV if env is None else env,
                   site.python or "python3", queue=queue)


def refusal(r: Resolved) -> str:
    """Why a run the test expects refused was refused."""
    assert r.skip_reason is not None, r
    return r.skip_reason


def placement(r: Resolved) -> Placement:
    """Where a run the test expects placed was placed."""
    assert r.placement is not None, r
    return r.placement


def normalised(text: str) -> str:
    return text.replace(str(paths.workloads_root()), "{WORKLOADS_ROOT}")


def render_case(target: str, case: str) -> str:
    site = load_site(target)
    devices, queue, walltime = cases(site)[case]
    r = resolved(target, devices, queue, walltime)
    if r.skipped:
        return f"# skipped: {r.skip_reason}\n"
    return normalised(render_script(r, RunFiles(Path(f"/scratch/orch/runs/{case}"))))


ALL_CASES = [(t, c) for t in targets() for c in ("1-device", "1-node", "2-nodes", "largest-queue")]


@pytest.mark.parametrize("target, case", ALL_CASES, ids=[f"{t}/{c}" for t, c in ALL_CASES])
def test_golden_scripts(target: str, case: str, tmp_path: Path) -> None:
    text = render_case(target, case)
    golden = GOLDEN / target.replace(":", "+") / f"{case}.sh"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run with ORCH_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"{golden} differs (ORCH_UPDATE_GOLDEN=1 regenerates it)"
    if not text.startswith("# skipped"):
        (tmp_path / "job.sh").write_text(text)
        subprocess.run(["bash", "-n", str(tmp_path / "job.sh")], check=True)


def test_no_stale_golden_files() -> None:
    expected = {(t.replace(":", "+"), f"{c}.sh") for t, c in ALL_CASES}
    found = {(p.parent.name, p.name) for p in GOLDEN.glob("*/*.sh")}
    assert found == expected


def test_every_builtin_site_and_system_loads() -> None:
    assert set(BUILTIN) <= set(available_sites())
    for target in targets():
        site = load_site(target)
        assert site.queues and site.device.per_node >= 1


# ------------------------------------------------------------------------------ Polaris


def test_polaris_queue_choice_and_directives(workdir: Path) -> None:
    """Acceptance: 1, 2, 10, 30 nodes -> debug, debug-scaling, prod (small), prod (medium)."""
    sweep = write(workdir / "polaris.yaml", """\
name: polaris-scaling
experiments:
  - name: gemm
    workload: gemm
    sites: [polaris]
    walltime: "00:45:00"
    grid:
      devices: [4, 8, 40, 120]
      precision: [bf16]
      m: 8192
""")
    out = json.loads(run_orch("plan", str(sweep), "--show", "--json", cwd=workdir,
                              env={"ORCH_POLARIS_PROJECT": "MyProject"}, check=True).stdout)
    by_devices = {r["devices"]: r for r in out["runs"]}
    assert {d: (r["nodes"], r["queue"]) for d, r in by_devices.items()} == {
        4: (1, "debug"), 8: (2, "debug-scaling"), 40: (10, "prod"), 120: (30, "prod")}
    tiers = {4: None, 8: None, 40: "small", 120: "medium"}
    for devices, row in by_devices.items():
        script = out["scripts"][row["run_id"]]
        nodes = row["nodes"]
        assert f"#PBS -l select={nodes}:system=polaris\n" in script
        assert "#PBS -l filesystems=home:eagle\n" in script and "#PBS -l place=scatter\n" in script
        assert "#PBS -A MyProject\n" in script and f"#PBS -q {row['queue']}\n" in script
        assert "#PBS -l walltime=00:45:00\n" in script
        assert f"mpiexec -n {4 * nodes} --ppn 4 --depth 16 --cpu-bind depth bash orch-gpu-affinity.sh " in script
        assert "export CUDA_VISIBLE_DEVICES=$(( 3 - local_rank % 4 ))" in script
        assert "local_rank=${PMI_LOCAL_RANK:-" in script
        assert "export NCCL_NET='AWS Libfabric'\n" in script and "export FI_CXI_DEFAULT_CQ_SIZE=131072\n" in script
        assert " -V" not in script
        if tiers[devices]:
            assert f"# queue prod routes this run to its {tiers[devices]} tier\n" in script
    for devices, tier in tiers.items():
        placed = resolved("polaris", devices).placement
        assert placed is not None and placed.queue_tier == tier


def test_polaris_walltime_stays_within_the_queue() -> None:
    # 30 nodes for 5 h: prod (medium) takes up to 6 h.
    placed = resolved("polaris", 120, walltime_s=5 * 3600).placement
    assert placed is not None and (placed.queue, placed.queue_tier) == ("prod", "medium")
    # 10 nodes for 4 h: prod (small) stops at 3 h, and nothing else takes 10 nodes that long.
    r = resolved("polaris", 40, walltime_s=4 * 3600)
    assert r.skipped and "exceeds the longest queue that fits 10 node(s) (prod (small): 03:00:00" in refusal(r)
    # 1 node for 2 h: past debug's hour, capacity (1-4 nodes, 168 h) takes it.
    placed = resolved("polaris", 4, walltime_s=2 * 3600).placement
    assert placed is not None and placed.queue == "capacity"
    # preemptable only by name
    assert "by name only: preemptable" in refusal(resolved("polaris", 20, walltime_s=2 * 3600))
    placed = resolved("polaris", 20, queue="preemptable", walltime_s=2 * 3600).placement
    assert placed is not None and placed.queue == "preemptable"


def test_polaris_needs_a_project() -> None:
    r = resolved("polaris", 4, env={})
    assert r.skipped and "set $ORCH_POLARIS_PROJECT or $ORCH_ACCOUNT" in refusal(r)


# ------------------------------------------------------------------------------ other sites


def test_site_specific_requests() -> None:
    def script(target: str, devices: int, **kw) -> str:
        return render_script(resolved(target, devices, **kw), RunFiles(Path("/r")))

    stanage = script("stanage", 2)
    assert "#SBATCH --gres=gpu:2\n" in stanage and "#SBATCH --mem=82G\n" in stanage
    assert "--gpus" not in stanage and "#SBATCH --qos=gpu\n" in stanage and "--partition=gpu-h100" in stanage
    bask = script("baskerville", 8)
    assert "#SBATCH --gpus-per-node=4\n" in bask and "#SBATCH --cpus-per-gpu=36\n" in bask
    assert "#SBATCH --qos=myqos\n" in bask and "--partition" not in bask and "--nodes=2" in bask
    assert "#SBATCH --constraint=a100_80\n" in script("baskerville:a100_80", 4)
    dawn = script("dawn", 16)
    assert "#SBATCH --gres=gpu:4\n" in dawn and "#SBATCH --ntasks-per-node=8\n" in dawn  # 4 GPUs = 8 stacks
    assert "export ZE_FLAT_DEVICE_HIERARCHY=FLAT\n" in dawn and "mpirun -n 16 -ppn 8 " in dawn
    assert "#SBATCH --account=myproject-dawn-gpu\n" in dawn and "--device xpu" in dawn
    assert "#SBATCH --partition=cosma8-shm2\n" in script("cosma8", 2)
    jade = {d: placement(resolved("jade2", d)).queue for d in (1, 2, 8)}
    assert jade == {1: "small", 2: "big", 8: "big"}
    assert placement(resolved("jade2", 1, queue="devel")).queue == "devel"
    # The AI Testbed's vendor systems run the vendor's own application, then orch's adapter
    # (orchestrator/sites/vendors/; their command lines are checked in tests/vendors/).
    sn = script("alcf-ai-testbed:sambanova", 16)
    assert "#SBATCH --gres=rdu:8\n" in sn and " compile -b 32 " in sn and "--pef-name=orch_bert" in sn
    assert "-- srun --nodes=2 --ntasks-per-node=8 --mpi=pmi2 python " in sn
    assert " --pef=pef/orch_bert/orch_bert.pef" in sn
    assert sn.index(" compile ") < sn.index(" run -b ") < sn.index(
        "-m orchestrator.sites.vendors.sambanova --from vendor.log")
    gc = script("alcf-ai-testbed:graphcore", 16)
    assert "#SBATCH --ipus=16\n" in gc and "#SBATCH --partition=p64\n" in gc and "#SBATCH --ntasks-per-node=1\n" in gc
    assert "srun --nodes=1 --ntasks=1 poprun " in gc and "--num-replicas=16 " in gc
    groq = script("alcf-ai-testbed:groq", 1)
    assert "#PBS -l select=1\n" in groq and "#PBS -l place=excl\n" in groq and "conda activate groqflow\n" in groq
    assert 'eval "$(/home/user/miniconda3/bin/conda shell.bash hook)"\nconda activate groqflow\n' in groq
    assert "proof_points/computer_vision/resnet50/resnet50.py" in groq
    cs = script("alcf-ai-testbed:cerebras", 1)
    assert " CSX --params orch-params.yaml --num_csx=1 --mode train --model_dir model_dir " in cs
    assert "#SBATCH" not in cs
    gaudi = script("alcf-ai-testbed:gaudi", 8)
    assert "deepspeed --num_nodes=1 --num_gpus=8 --no_local_rank --module workloads.gemm " in gaudi
    assert "--device hpu" in gaudi


# Peak dense TFLOP/s and bandwidth from shared/reference/hardware.md (per logical device).
HARDWARE = {
    "A100-SXM4-40GB": ({"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312}, 1555, 40),
    "A100-SXM4-80GB": ({"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312}, 2039, 80),
    "H100-PCIe-80GB": ({"fp32": 51.2, "tf32": 378, "fp16": 756, "bf16": 756, "fp8": 1513}, 2000, 80),
    "V100-SXM2-32GB": ({"fp32": 15.7, "fp16": 125}, 900, 32),
    "MI100": ({"fp32": 46.1, "fp16": 184.6, "bf16": 92.3}, 1230, 32),
    "MI210": ({"fp32": 45.3, "fp16": 181, "bf16": 181}, 1600, 64),
    "Intel Max 1550 (one stack)": ({"fp32": 26, "tf32": 209.5, "fp16": 419.5, "bf16": 419.5}, 1638.5, 64),
    "Habana Gaudi2": ({"bf16": 432, "fp8": 865}, 2450, 96),
    "H100-SXM5-80GB": ({"fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}, 3350, 80),
    "H200-SXM-141GB": ({"fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}, 4800, 141),
    # Not in hardware.md: NVIDIA's Blackwell technical brief and DGX B200 datasheet, cited in sites/dgx.yaml.
    "B200-180GB": ({"fp32": 80, "tf32": 1100, "fp16": 2250, "bf16": 2250, "fp8": 4500}, 8000, 180),
    # Not in hardware.md: AMD's MI250X page (LUMI-G), per GCD (half a module), cited in sites/lumi.yaml.
    "AMD MI250X (one GCD)": ({"fp32": 23.95, "fp16": 191.5, "bf16": 191.5}, 1638.4, 64),
}
# Precisions a device has (a peak) that orch's workloads do not run on its device type, so a profile
# does not list them (a plan skips them rather than a job failing): fp8 on hpu, which
# workloads/harness/precision.py fp8_support refuses (gemm's torch._scaled_mm; no fp8 training).
NOT_RUN_BY_WORKLOADS: dict[str, set[str]] = {"hpu": {"fp8"}}
# Devices hardware.md lists with fewer peaks than precisions (Gaudi2 runs fp32 and fp16 too).
PEAKS_INCOMPLETE = {"Habana Gaudi2"}
# Peaks that are not in hardware.md but on the vendor pages the profile cites (ALCF AI Testbed
# pages: user-guides docs/ai-testbed/graphcore/index.md and groq/index.md; Graphcore's datasheets for the GC200).
VENDOR_PAGE_PEAKS = {"Graphcore Bow IPU": {"fp16": 350}, "GroqCard (GroqChip)": {"fp16": 188},
                     "Graphcore GC200 IPU": {"fp16": 250}}  # Graphcore's IPU-M2000 / POD16 datasheets


@pytest.mark.parametrize("target", [t for t in targets() if t != "local"])
def test_device_facts_match_hardware_md(target: str) -> None:
    device = load_site(target).device
    if device.model not in HARDWARE:
        assert device.peak_tflops == VENDOR_PAGE_PEAKS.get(device.model, {})  # else no figure: no MFU
        return
    peaks, bandwidth, memory = HARDWARE[device.model]
    assert {k: v for k, v in device.peak_tflops.items() if not k.startswith("fp64")} == peaks
    assert (device.bandwidth_gbs, device.memory_gb) == (bandwidth, memory)
    runnable = set(peaks) - NOT_RUN_BY_WORKLOADS.get(device.type, set())
    assert not set(device.precisions) & NOT_RUN_BY_WORKLOADS.get(device.type, set()), target
    if device.model in PEAKS_INCOMPLETE:
        assert runnable <= set(device.precisions)
    else:
        assert set(device.precisions) == runnable  # a precision without a peak is one the device lacks


def test_v100_has_no_bf16_and_ipus_come_in_powers_of_two() -> None:
    r = resolved("jade2", 1)  # precision_for picks fp32 on V100
    assert r.placement is not None
    site = load_site("jade2")
    bf16 = resolve(spec("jade2", 1, "bf16"), site, ENV, "python3")
    assert bf16.skip_reason == "precision bf16 not supported by V100-SXM2-32GB on jade2 (supported: fp32, fp16)"
    gc = load_site("alcf-ai-testbed:graphcore")
    assert "powers of two, got 12" in refusal(resolve(spec("alcf-ai-testbed:graphcore", 12, "fp16"), gc, ENV,
                                                      "python3"))


def test_clear_refusals() -> None:
    assert "site polaris has no queue 'batch' (queues: debug, debug-scaling, prod, capacity, preemptable)" in \
        refusal(resolved("polaris", 4, queue="batch"))
    over = refusal(resolved("polaris", 12, queue="debug"))
    assert "queue debug cannot take 3 node(s)" in over and "3 node(s) over the limit of 2" in over
    long = refusal(resolved("polaris", 4, queue="debug", walltime_s=7200))
    assert "walltime 02:00:00 over the limit of 01:00:00" in long
    small = refusal(resolved("polaris", 8, queue="prod"))
    assert "prod (small)" in small and "2 node(s) under the minimum of 10" in small
    assert "2 device(s) over the limit of 1" in refusal(resolved("jade2", 2, queue="small"))
    with pytest.raises(UserError, match="unknown site 'nowhere'"):
        load_site("nowhere")
    with pytest.raises(UserError, match="has no system 'tpu'"):
        load_site("alcf-ai-testbed:tpu")


def test_site_sources_are_commented() -> None:
    """Every built-in profile names its sources, and every resource request says where it is from."""
    for name in BUILTIN:
        if name == "local":
            continue
        path = paths.builtin_sites_dir() / f"{name}.yaml"
        text = path.read_text()
        assert "sites.md" in text, path
        lines = text.splitlines()
        for i, line in enumerate(lines):
            key = line.strip().split(":", 1)[0]
            if key in ("gpu_request", "gres_name", "cpus_per_device", "mem", "select", "place", "filesystems",
                       "constraint", "max_walltime", "qos", "suffix") and line.strip() != "resources: {}":
                assert "#" in line, f"{path.name}:{i + 1}: {line.strip()} has no source comment"


# ------------------------------------------------------------------------------ user sites


MY_SITE = """\
# A site of my own: one YAML file, no Python.
name: mycluster
description: Two nodes of 2 GPUs under Slurm.
scheduler: slurm
max_nodes: 2
device:
  type: cuda
  model: A100-SXM4-80GB
  per_node: 2
  precisions: [fp32, bf16]
  peak_tflops: {fp32: 19.5, bf16: 312}
resources:
  gpu_request: gres
queues:
  - name: short
    max_nodes: 1
    max_walltime: "00:30:00"
  - name: long
    max_nodes: 2
    max_walltime: "12:00:00"
launcher:
  name: srun
"""


def test_a_new_site_is_one_yaml_file_in_a_user_directory(workdir: Path, tmp_path: Path) -> None:
    mine = tmp_path / "my-sites"
    write(mine / "mycluster.yaml", MY_SITE)
    listed = json.loads(run_orch("--sites-dir", str(mine), "sites", "list", "--json", cwd=workdir, check=True).stdout)
    assert {r["site"] for r in listed} >= {"mycluster", "polaris", "local"}
    shown = json.loads(run_orch("sites", "show", "mycluster", "--json", cwd=workdir,
                                env={"ORCH_SITES_PATH": str(mine)}, check=True).stdout)
    assert shown["resources"]["gpu_request"] == "gres"
    sweep = write(workdir / "s.yaml", """\
name: mine
experiments:
  - name: g
    workload: gemm
    sites: [mycluster]
    grid:
      devices: [1, 4, 8]
      precision: [bf16]
""")
    out = json.loads(run_orch("plan", str(sweep), "--show", "--json", cwd=workdir,
                              env={"ORCH_SITES_PATH": str(mine)}, check=True).stdout)
    got = {r["devices"]: (r["status"], r["queue"], r["nodes"]) for r in out["runs"]}
    assert got == {1: ("planned", "short", 1), 4: ("planned", "long", 2), 8: ("skipped", None, None)}
    script = next(s for s in out["scripts"].values() if s and "--nodes=2" in s)
    assert "#SBATCH --gres=gpu:2\n" in script and "#SBATCH --partition=long\n" in script
    # A typo in the file is reported with its file, line and field.
    write(mine / "mycluster.yaml", MY_SITE.replace("gpu_request: gres", "gpu_request: gpu"))
    bad = run_orch("plan", str(sweep), cwd=workdir, env={"ORCH_SITES_PATH": str(mine)})
    assert bad.returncode == 2 and "mycluster.yaml:13: resources.gpu_request: Input should be" in bad.stderr
