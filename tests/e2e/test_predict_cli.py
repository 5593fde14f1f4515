"""`orch predict` through the real CLI: a ranked table, JSON, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch


def test_predict_ranks_layouts_of_gpt2_xl_on_polaris(workdir: Path) -> None:
    out = json.loads(run_orch("predict", "--model", "gpt2-xl", "--devices", "8", "--site", "polaris", "--json",
                              cwd=workdir, check=True).stdout)
    assert out["device"] == "A100-SXM4-40GB" and out["precision"] == "bf16" and out["global_batch"] == 64
    layouts = out["layouts"]
    assert [r["rank"] for r in layouts] == list(range(1, len(layouts) + 1))
    assert all(r["dp"] * r["tp"] * r["pp"] * r["sp"] == 8 for r in layouts)
    # Data, tensor, pipeline and sequence layouts and every ZeRO stage are ranked.
    assert any(r["tp"] > 1 for r in layouts) and any(r["pp"] > 1 for r in layouts)
    assert any(r["sp"] > 1 for r in layouts) and {r["zero"] for r in layouts} == {0, 1, 2, 3}
    fits = [r["fits"] for r in layouts]
    assert fits[0] == "yes" and "NO" in fits and fits == sorted(fits, key=lambda f: f != "yes")
    assert all(r["memory_gb"] <= 40 for r in layouts if r["fits"] == "yes")
    assert all(r["memory_gb"] > 40 for r in layouts if r["fits"] == "NO")
    steps = [r["step_s"] for r in layouts if r["fits"] == "yes"]
    assert steps == sorted(steps)
    assert all(0 < r["mfu"] < 1 for r in layouts)


def test_predict_table(workdir: Path) -> None:
    text = run_orch("predict", "--model", "gpt2", "--devices", "4", "--site", "polaris", "--top", "5",
                    cwd=workdir, check=True).stdout
    for column in ("layout", "dp", "tp", "pp", "sp", "zero", "recompute", "step s", "tokens/s", "GB/device",
                   "fits?", "MFU"):
        assert column in text
    assert "gpt2 on 4 x A100-SXM4-40GB (polaris)" in text and "more layout(s)" in text


def test_predict_errors_are_one_line(workdir: Path) -> None:
    cases = [
        (("--model", "gpt5", "--devices", "8", "--site", "polaris"), "unknown model 'gpt5'"),
        (("--model", "gpt2", "--devices", "8", "--site", "atlantis"), "unknown site 'atlantis'"),
        (("--model", "gpt2", "--devices", "6", "--site", "polaris"), "does not fill whole nodes of 4"),
        (("--model", "gpt2", "--devices", "0", "--site", "polaris"), "--devices"),
        (("--model", "gpt2", "--devices", "4", "--site", "jade2", "--precision", "bf16"), "runs fp32, fp16"),
    ]
    for args, message in cases:
        done = run_orch("predict", *args, cwd=workdir)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
