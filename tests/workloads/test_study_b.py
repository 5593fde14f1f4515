"""Study B as it was run: lightning-GPT's presets and minGPT's count, manual attention,
character-level data (workloads/models/configs.py, models/gpt.py, data/chars.py, data/plays.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from orchestrator.predict import memory
from tests.conftest import run_orch
from tests.workloads.workload_helpers import run_module
from workloads.data import plays
from workloads.data.chars import CharTokenizer, tokenize
from workloads.models.configs import SIZES, mingpt_params, study_b_config
from workloads.models.gpt import GPT, Block

TINY = ["--model", "tiny", "--batch-size", "2", "--seq-len", "32", "--warmup", "1", "--iters", "2"]


def _shown_presets(tmp_path: Path) -> dict[str, dict]:
    proc = run_orch("workloads", "show", "gpt2", "--json", cwd=tmp_path, check=True)
    return {row["preset"]: row for row in json.loads(proc.stdout)["presets"]}


def test_workloads_show_reports_the_study_counts(tmp_path: Path) -> None:
    presets = _shown_presets(tmp_path)
    # minGPT prints "number of parameters: %.2fM"; study B reports 85.21M and 302.51M.
    assert f"{presets['gpt2']['params_mingpt_study_b'] / 1e6:.2f}M" == "85.21M"
    assert f"{presets['gpt2-medium']['params_mingpt_study_b'] / 1e6:.2f}M" == "302.51M"
    # tiny-shakespeare's 65 characters would not give it: the study's text is the complete works
    assert f"{mingpt_params(study_b_config('gpt2').with_(vocab_size=65)) / 1e6:.2f}M" == "85.20M"
    # lightning-GPT's shapes by name
    assert (presets["gpt2-xxxl"]["n_layer"], presets["gpt2-xxxl"]["n_head"], presets["gpt2-xxxl"]["n_embd"]) \
        == (100, 30, 1920)
    text = run_orch("workloads", "show", "gpt2", cwd=tmp_path, check=True).stdout
    assert "85.21M" in text and "302.51M" in text


@pytest.mark.parametrize("name", ["gpt2", "gpt2-medium"])
def test_mingpt_count_is_what_mingpt_prints_for_the_built_model(name: str) -> None:
    """minGPT: sum(p.numel() for p in self.transformer.parameters()), lm_head (untied) left out."""
    cfg = study_b_config(name)
    with torch.device("meta"):  # shapes only, no memory
        model = GPT(cfg)
    transformer = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("lm_head"))
    assert transformer == mingpt_params(cfg)
    assert model.lm_head.weight is not model.wte.weight  # untied, as minGPT


def _pair(**changes: object) -> tuple[GPT, GPT]:
    cfg = SIZES["tiny"].with_(vocab_size=67, block_size=16, **changes)
    torch.manual_seed(0)
    fused = GPT(cfg.with_(attention="sdpa"))
    manual = GPT(cfg.with_(attention="manual"))
    manual.load_state_dict(fused.state_dict())  # same weights: no buffer differs between the two
    return fused, manual


def test_manual_attention_matches_sdpa_and_materialises_the_scores() -> None:
    fused, manual = _pair()
    x = torch.randint(0, 67, (3, 16), generator=torch.Generator().manual_seed(1))
    y = torch.roll(x, -1, dims=1)
    saved: dict[str, list[tuple[int, ...]]] = {}
    outputs = {}
    for name, model in (("sdpa", fused), ("manual", manual)):
        shapes: list[tuple[int, ...]] = []

        def pack(t: torch.Tensor, shapes: list[tuple[int, ...]] = shapes) -> torch.Tensor:
            shapes.append(tuple(t.shape))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits, loss = model(x, y)
        loss.backward()
        block = model.blocks[0]
        assert isinstance(block, Block)
        grad = block.attn.c_attn.weight.grad
        assert grad is not None
        outputs[name] = (logits.detach(), loss.detach(), grad.clone())
        saved[name] = shapes
    for a, b in zip(outputs["sdpa"], outputs["manual"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    scores = (3, 2, 16, 16)  # (batch, heads, s, s)
    assert scores in saved["manual"]  # kept for the backward pass
    assert scores not in saved["sdpa"]


def test_manual_attention_is_causal() -> None:
    _, manual = _pair()
    manual.eval()
    x = torch.randint(0, 67, (1, 16))
    changed = x.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % 67  # only the future of position 9 changes
    with torch.no_grad():
        a, _ = manual(x)
        b, _ = manual(changed)
    torch.testing.assert_close(a[0, :10], b[0, :10])
    assert not torch.allclose(a[0, 10:], b[0, 10:])


def test_char_tokenizer_round_trips_and_vocabulary_is_the_distinct_characters() -> None:
    for text in ("First Citizen:\nBefore we proceed any further, hear me speak.\n",
                 "naïve café — 東京 ✓\n"):  # the non-ASCII path too
        tokenizer, ids = tokenize(text.encode("utf-8"))
        assert tokenizer.alphabet == "".join(sorted(set(text)))
        assert tokenizer.vocab_size == len(set(text)) and int(ids.max()) == tokenizer.vocab_size - 1
        assert tokenizer.decode(ids) == text
        assert list(tokenizer.encode(text)) == list(ids)
    with pytest.raises(KeyError, match="'z'"):
        CharTokenizer.fit("abc").encode("abz")


def test_generated_shakespeare_has_the_study_files_size_and_alphabet() -> None:
    text = plays.make()
    assert len(text) == 4_573_338  # shakespeare_input.txt's characters
    tokenizer, _ = tokenize(text.encode("ascii"))
    assert tokenizer.alphabet == plays.ALPHABET and tokenizer.vocab_size == 67
    assert text == plays.generate()  # deterministic, not just cached


def test_the_made_text_is_kept_and_read_back_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache under ORCH_DATA_CACHE: the first make writes the text, a later one reads it; a file
    cut short is made again, and `off` keeps nothing."""
    monkeypatch.setenv("ORCH_DATA_CACHE", str(tmp_path / "data"))
    made = plays.make.__wrapped__(5000, 7)
    (kept,) = (tmp_path / "data").iterdir()
    assert kept.read_text() == made == plays.generate(5000, 7) and kept.name.startswith("plays-5000-7-")
    with monkeypatch.context() as m:  # read back, not made again
        m.setattr(plays, "generate", lambda *a: pytest.fail("made again though the cache holds it"))
        assert plays.make.__wrapped__(5000, 7) == made
    kept.write_text(made[:100])  # cut short (a full disk): made again and rewritten
    assert plays.make.__wrapped__(5000, 7) == made and kept.read_text() == made
    monkeypatch.setenv("ORCH_DATA_CACHE", "off")
    kept.unlink()
    assert plays.make.__wrapped__(5000, 7) == made and not any((tmp_path / "data").iterdir())


def test_tiny_run_with_manual_attention_over_characters(run_workload) -> None:
    doc = run_workload("workloads.gpt2", [*TINY, "--data", "shakespeare", "--tokenizer", "char",
                                          "--attention", "manual", "--block-size", "32", "--dropout", "0.1",
                                          "--tie-weights", "false", "--epochs", "2", "--max-steps-per-epoch", "2"])
    m = doc["metrics"]
    cfg = SIZES["tiny"].with_(vocab_size=67, block_size=32)
    assert m["vocab_size"] == 67 and m["block_size"] == 32
    assert m["model_params_with_position"] == mingpt_params(cfg)  # what minGPT prints
    assert m["tokens_per_s"] > 0 and m["epoch_time_s"] > 0 and m["steps_per_epoch"] == 2


def test_char_tokenizer_over_a_users_file(run_workload, tmp_path: Path) -> None:
    text = "To be, or not to be: that is the question.\n" * 200
    path = tmp_path / "input.txt"
    path.write_text(text)
    doc = run_workload("workloads.gpt2", [*TINY, "--data", f"file:{path}", "--tokenizer", "char",
                                          "--epochs", "1"])
    m = doc["metrics"]
    assert m["vocab_size"] == len(set(text))
    # disjoint windows of seq+1 characters (minGPT's CharDataset count), batch 2
    assert m["steps_per_epoch"] == len(text) // 33 // 2


@pytest.mark.parametrize("extra, needle", [
    (["--data", "synthetic", "--tokenizer", "char"], "needs a text"),
    (["--data", "shakespeare", "--tokenizer", "char", "--vocab-size", "10"], "smaller than the 67"),
    (["--block-size", "16"], "exceeds --block-size 16"),
])
def test_study_b_options_refused_in_one_line(extra: list[str], needle: str) -> None:
    proc = run_module("workloads.gpt2", [*TINY, *extra], check=False)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_memory_model_counts_the_materialised_scores() -> None:
    base = {"model": "gpt2", "batch_size": 64, "seq_len": 1024, "precision": "fp16"}
    fused = memory.gpt_training(base)
    manual = memory.gpt_training({**base, "attention": "manual"})
    # 7 bytes per score (the fp32 softmax output, the dropout mask, the 16-bit dropout output)
    # x heads x s^2 x batch x layers
    assert manual - fused == 12 * 7 * 12 * 1024 * 1024 * 64
