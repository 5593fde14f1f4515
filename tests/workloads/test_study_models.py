"""The study-C model benchmarks (unet, resnet50, bert, distilbert, braggnn, candle_uno) and the
gpt2 weight sparsity of study A.5: tiny runs on CPU with validated metrics, FLOP formulas
against hand-computed values and against PyTorch's own FLOP counter on the real models."""

from __future__ import annotations

import math

import pytest

from tests.workloads.workload_helpers import median_rate, run_module, total_rate
from workloads import flops
from workloads.models import sizes

# --- the programs, tiny, one CPU process ------------------------------------------------------

FAST = ["--size", "tiny", "--warmup", "1", "--iters", "3"]


def _check_common(doc: dict, batch: int, per_sample_forward: int, *, train: bool, accum: int = 1,
                  ranks: int = 1, peak: float | None = None) -> dict:
    m = doc["metrics"]
    p50 = m["step_time_p50_s"]
    assert p50 > 0 and m["step_time_p90_s"] >= p50 and m["peak_mem_gb"] > 0
    assert doc["timing"]["timed_steps"] == 3 and doc["timing"]["warmup_steps"] == 1
    assert m["global_batch"] == batch * accum * ranks
    steps = doc["timing"]["step_times_s"]  # each the slowest rank's
    assert math.isclose(m["samples_per_s"], total_rate(batch * accum * ranks, steps), rel_tol=1e-12)
    assert math.isclose(m["samples_per_s_median"], median_rate(batch * accum * ranks, steps), rel_tol=1e-12)
    assert math.isclose(m["timed_time_s"], math.fsum(steps), rel_tol=1e-12)
    assert m["flops_forward_per_sample"] == per_sample_forward
    assert m["flops_per_sample"] == per_sample_forward * (3 if train else 1)
    assert math.isclose(m["tflops"], m["flops_per_sample"] * m["samples_per_s"] / 1e12, rel_tol=1e-9)
    if peak is None:
        assert m["mfu"] is None  # no --peak-tflops given
    else:
        assert math.isclose(m["mfu"], m["tflops"] / (ranks * peak), rel_tol=1e-9)
    if train:
        assert m["loss"] is not None and m["loss"] >= 0 and "latency_p50_s" not in m
    else:
        assert m["latency_p50_s"] == p50 and m["latency_p90_s"] == m["step_time_p90_s"]
        assert math.isclose(m["latency_per_sample_p50_s"], p50 / batch, rel_tol=1e-9)
    return m


def test_unet_trains(run_workload) -> None:
    doc = run_workload("workloads.unet", [*FAST, "--batch-size", "2", "--precision", "bf16", "--peak-tflops", "1"])
    cfg = sizes.UNET_SIZES["tiny"]
    m = _check_common(doc, 2, flops.unet_forward(32, cfg.in_channels, cfg.classes, cfg.base, cfg.depth),
                      train=True, peak=1.0)
    assert m["image_size"] == 32 and doc["params"]["mode"] == "train" and doc["precision"] == "bf16"


@pytest.mark.parametrize("mode", ["train", "inference"])
def test_resnet50(run_workload, mode: str) -> None:
    doc = run_workload("workloads.resnet50", [*FAST, "--batch-size", "4", "--mode", mode])
    cfg = sizes.RESNET_SIZES["tiny"]
    m = _check_common(doc, 4, flops.resnet_forward(32, cfg.layers, cfg.base, cfg.classes), train=mode == "train")
    assert m["model_params"] > 0


def test_bert_pretraining_with_accumulation(run_workload) -> None:
    doc = run_workload("workloads.bert", [*FAST, "--batch-size", "2", "--seq-len", "32", "--grad-accum", "2",
                                          "--max-predictions", "5"])
    cfg = sizes.BERT_SIZES["tiny"]
    m = _check_common(doc, 2, flops.bert_pretraining_forward(1, 32, cfg.n_embd, cfg.n_layer, cfg.vocab_size, 5),
                      train=True, accum=2)
    assert m["model_params"] == sizes.bert_params(cfg) and m["max_predictions"] == 5
    assert math.isclose(m["tokens_per_s"], m["samples_per_s"] * 32, rel_tol=1e-9)
    assert 0 < m["loss"] < 20  # MLM over 1000 ids (~6.9) + NSP (~0.7) at initialisation


def test_bert_two_ranks_data_parallel(run_workload) -> None:
    doc = run_workload("workloads.bert", [*FAST, "--batch-size", "2", "--seq-len", "16", "--grad-accum", "2"],
                       nproc=2)
    assert doc["world_size"] == 2 and doc["env"]["backend"] == "gloo"
    cfg = sizes.BERT_SIZES["tiny"]
    _check_common(doc, 2, flops.bert_pretraining_forward(1, 16, cfg.n_embd, cfg.n_layer, cfg.vocab_size, 15),
                  train=True, accum=2, ranks=2)


def test_distilbert_latency(run_workload) -> None:
    doc = run_workload("workloads.distilbert", [*FAST, "--seq-len", "16", "--precision", "bf16"])
    cfg = sizes.DISTILBERT_SIZES["tiny"]
    m = _check_common(doc, 1, flops.distilbert_classify_forward(1, 16, cfg.n_embd, cfg.n_layer, cfg.num_labels),
                      train=False)
    assert m["model_params"] == sizes.bert_params(cfg, pretraining_heads=False)
    assert doc["params"]["batch_size"] == 1 and doc["params"]["seq_len"] == 16  # batch 1 by default


@pytest.mark.parametrize("size", ["tiny", "full"])
def test_braggnn(run_workload, size: str) -> None:
    doc = run_workload("workloads.braggnn", ["--size", size, "--warmup", "1", "--iters", "3", "--batch-size", "64"])
    cfg = sizes.BRAGGNN_SIZES[size]
    m = _check_common(doc, 64, flops.braggnn_forward(cfg.patch, cfg.channels, cfg.dense), train=True)
    if size == "full":
        assert m["model_params"] == 45394 and m["flops_forward_per_sample"] == 4_212_768


@pytest.mark.parametrize("mode, drugs", [("train", 1), ("inference", 2)])
def test_candle_uno(run_workload, mode: str, drugs: int) -> None:
    doc = run_workload("workloads.candle_uno", [*FAST, "--batch-size", "8", "--mode", mode, "--drugs", str(drugs)])
    cfg = sizes.UNO_SIZES["tiny"]
    _check_common(doc, 8, flops.uno_forward(cfg.cell_features, cfg.drug_descriptors, cfg.drug_fingerprints,
                                            cfg.feature_layers, cfg.dense_layers, drugs), train=mode == "train")


@pytest.mark.parametrize("module, args, words", [
    ("workloads.unet", ["--image-size", "30"], "multiple of 2**2"),
    ("workloads.bert", ["--seq-len", "1024"], "within 2..512"),
    ("workloads.distilbert", ["--precision", "tf32"], "tf32"),
])
def test_refusals_are_one_line_exit_2(module: str, args: list[str], words: str) -> None:
    proc = run_module(module, [*FAST, *args], check=False)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr.strip().splitlines()[-1] and "Traceback" not in proc.stderr


# --- gpt2 --sparsity (study A.5) ----------------------------------------------------------------

GPT_TINY = ["--model", "tiny", "--batch-size", "2", "--seq-len", "32", "--warmup", "1", "--iters", "3"]


def test_gpt2_sparsity_kept_through_training(run_workload) -> None:
    doc = run_workload("workloads.gpt2", [*GPT_TINY, "--sparsity", "0.8"])
    m = doc["metrics"]
    # tiny: 2 blocks of qkv (64x192), proj (64x64), fc (64x256), proj (256x64) = 2 x 49152 weights,
    # each tensor pruned to round(0.8 x its size)
    per_block = sum(round(0.8 * n) for n in (64 * 192, 64 * 64, 64 * 256, 256 * 64))
    assert m["prunable_params"] == 98_304 and m["pruned_params"] == 2 * per_block == 78_642
    assert m["weight_sparsity"] == pytest.approx(0.8, abs=1e-4)
    assert m["measured_sparsity"] == pytest.approx(m["weight_sparsity"])  # still zero after 4 AdamW steps
    assert m["tokens_per_s"] > 0 and doc["params"]["sparsity"] == 0.8


def test_gpt2_sparsity_refused_for_sharded_strategies() -> None:
    proc = run_module("workloads.gpt2", [*GPT_TINY, "--sparsity", "0.5", "--strategy", "fsdp-full"], check=False)
    assert proc.returncode == 2 and "ddp only" in proc.stderr.strip().splitlines()[-1]
    proc = run_module("workloads.gpt2", [*GPT_TINY, "--sparsity", "1.0"], check=False)
    assert proc.returncode == 2 and "[0, 1)" in proc.stderr.strip().splitlines()[-1]


def test_magnitude_mask_and_post_step_hook() -> None:
    import torch

    from workloads import sparsity
    from workloads.models.configs import SIZES
    from workloads.models.gpt import GPT

    w = torch.tensor([[0.5, -3.0, 0.1], [2.0, -0.2, 1.0]])
    mask = sparsity.magnitude_mask(w, 0.5)  # drop the 3 smallest |w|: 0.1, -0.2, 0.5
    assert mask.tolist() == [[False, True, False], [True, False, True]]
    assert sparsity.magnitude_mask(w, 0.0).all()

    class Trainer:  # what attach needs of strategies.TorchTrainer
        def __init__(self) -> None:
            torch.manual_seed(0)
            self.model = GPT(SIZES["tiny"].with_(vocab_size=50, block_size=16))
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2)

    trainer = Trainer()
    report = sparsity.attach(trainer, 0.6, "ddp")
    assert sparsity.measured_sparsity(trainer.model) == pytest.approx(0.6, abs=1e-4)
    for _ in range(2):
        x = torch.randint(0, 50, (2, 16))
        _, loss = trainer.model(x, x)
        loss.backward()  # the pruned weights do get gradients ...
        trainer.opt.step()  # ... and the hook puts them back to zero
        trainer.opt.zero_grad()
    assert report()["measured_sparsity"] == pytest.approx(report()["weight_sparsity"])
    assert trainer.model.wte.weight.ne(0).all()  # embeddings (and the tied head) stay dense


# --- FLOP formulas: by hand --------------------------------------------------------------------

def test_linear_mlp_and_transposed_conv() -> None:
    assert flops.TRAIN_FACTOR == 3
    assert flops.linear(3, 4, 5) == 120
    assert flops.mlp((10, 20, 5), rows=2) == 2 * 2 * (10 * 20 + 20 * 5)
    # 4x4 input, 8 -> 4 channels, 2x2 kernel at stride 2, batch 2: each input pixel writes 2x2x4 outputs
    assert flops.conv_transpose2d(4, 4, 8, 2, 4) == 2 * 4 * 4 * 8 * 4 * 4 * 2 == 8192


def test_unet_by_hand() -> None:
    # image 8, 1 -> 1 channel, base 2, depth 1:
    #   inc 8x8 conv 1->2 (2304) + 2->2 (4608); down 4x4 conv 2->4 (2304) + 4->4 (4608);
    #   up: transposed 4->2 on 4x4 (1024), 8x8 conv 4->2 (9216) + 2->2 (4608); out 1x1 2->1 (256)
    assert flops.unet_forward(8, 1, 1, 2, 1) == 2304 + 4608 + 2304 + 4608 + 1024 + 9216 + 4608 + 256 == 28_928
    assert flops.unet_forward(8, 1, 1, 2, 1, batch=3) == 3 * 28_928
    with pytest.raises(ValueError):
        flops.unet_forward(30, 3, 1, 64, 4)


def test_resnet_by_hand() -> None:
    # image 32, 1 channel in, base 2, one stage of one block, 3 classes:
    #   stem 7x7/2 -> 16x16: 2*16*16*2*1*49 = 50176; max-pool -> 8x8
    #   block (width 2, out 8): 1x1 2->2 512, 3x3 2->2 4608, 1x1 2->8 2048, projection 2->8 2048; fc 8->3 48
    assert flops.resnet_forward(32, (1,), base=2, classes=3, in_channels=1) == 50176 + 512 + 4608 + 2048 + 2048 + 48
    # a second stage (width 4, out 16, stride 2 on 8x8 -> 4x4):
    #   1x1 8->4 on 8x8 4096, 3x3/2 4->4 to 4x4 4608, 1x1 4->16 2048, projection 1x1/2 8->16 4096; fc 16->3 96
    assert flops.resnet_forward(32, (1, 1), base=2, classes=3, in_channels=1) == (
        50176 + 512 + 4608 + 2048 + 2048 + 4096 + 4608 + 2048 + 4096 + 96)
    # ResNet-50 at 224x224: the usual 4.09 G multiply-adds (convolutions and the fc layer)
    assert flops.resnet_forward(224, (3, 4, 6, 3)) == 8_178_368_512


def test_bert_and_distilbert_by_hand() -> None:
    # b=1, s=4, h=8, L=1, V=10, 2 predictions: layer 12*64 + 13*8 = 872 parameters
    #   encoder 4 * (2*872 + 4*8*4) = 7488; MLM 2 * (2*8*8 + 2*8*10) = 576; NSP 2*8*8 + 2*8*2 = 160
    assert flops.bert_pretraining_forward(1, 4, 8, 1, 10, 2) == 7488 + 576 + 160 == 8224
    assert flops.distilbert_classify_forward(1, 4, 8, 1, 2) == 7488 + 2 * 8 * 8 + 2 * 8 * 2 == 7648
    # BERT-Large, sequence 128, 20 predictions: training ~ 6 N_encoder s + attention, within the heads' share
    large = sizes.BERT_SIZES["large"]
    train = 3 * flops.bert_pretraining_forward(1, 128, 1024, 24, large.vocab_size, 20)
    encoder = 6 * 24 * flops.transformer_layer_params(1024) * 128 + 12 * 24 * 1024 * 128 * 128
    assert encoder < train < encoder * 1.05


def test_braggnn_and_uno_by_hand() -> None:
    # conv 1->64 on 11x11 (93312); non-local block on 81 positions, 32 inner channels: projections
    # 3 x 2*81*64*32 (995328), attention 2 x 2*81*81*32 (839808), back 2*81*32*64 (331776);
    # conv 64->32 to 7x7 (1806336); conv 32->8 to 5x5 (115200); dense 200-64-32-16-8-2 (31008)
    assert flops.braggnn_forward() == 93312 + 995328 + 839808 + 331776 + 1806336 + 115200 + 31008 == 4_212_768
    # Uno: cell 942-1000-1000-1000 (5,884,000), descriptors 5270-... (14,540,000),
    # fingerprints 2048-... (8,096,000), dense 3001-1000-1000-1000-1 (10,004,000)
    full = sizes.UNO_SIZES["full"]
    assert flops.uno_forward(942, 5270, 2048, full.feature_layers, full.dense_layers) == 38_524_000
    assert flops.uno_forward(942, 5270, 2048, full.feature_layers, full.dense_layers, batch=4) == 4 * 38_524_000
    # drug pairs: both drugs through the drug sub-networks, two doses in the concatenation
    pair = flops.uno_forward(942, 5270, 2048, full.feature_layers, full.dense_layers, drugs=2)
    assert pair == 5_884_000 + 2 * (14_540_000 + 8_096_000) + flops.mlp((5002, 1000, 1000, 1000, 1))


def test_bert_parameter_counts() -> None:
    # the published sizes: BERT-Base with its pre-training heads 110,106,428; DistilBERT classifier 66,955,010
    assert sizes.bert_params(sizes.BERT_SIZES["base"]) == 110_106_428
    assert sizes.bert_params(sizes.DISTILBERT_SIZES["full"], pretraining_heads=False) == 66_955_010


# --- FLOP formulas: against PyTorch's FLOP counter on the real models ---------------------------

def _counted(model, *inputs) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*inputs)
    return int(counter.get_total_flops())


def test_formulas_match_the_models_flop_counter() -> None:
    import torch

    from workloads.models.bert import BertForPreTraining, DistilBertForSequenceClassification
    from workloads.models.braggnn import BraggNN
    from workloads.models.resnet import ResNet
    from workloads.models.unet import UNet
    from workloads.models.uno import Uno

    torch.manual_seed(0)
    u = sizes.UNET_SIZES["tiny"]
    assert _counted(UNet(u), torch.randn(2, 3, 32, 32)) == flops.unet_forward(32, 3, 1, u.base, u.depth, batch=2)
    r = sizes.RESNET_SIZES["tiny"]
    assert _counted(ResNet(r), torch.randn(1, 3, 64, 64)) == flops.resnet_forward(64, r.layers, r.base, r.classes)
    assert _counted(BraggNN(sizes.BRAGGNN_SIZES["full"]), torch.randn(3, 1, 11, 11)) == flops.braggnn_forward(batch=3)
    c = sizes.UNO_SIZES["tiny"]
    got = _counted(Uno(c), torch.randn(2, 32), torch.rand(2, 1), torch.randn(2, 1, 64), torch.randn(2, 1, 32))
    assert got == flops.uno_forward(32, 64, 32, c.feature_layers, c.dense_layers, batch=2)

    # Transformers: the counter skips biases and LayerNorms (our 2*13h per token per layer) and,
    # depending on the attention kernel, the attention products (4*h*s per token per layer).
    b, s, p = 2, 16, 5
    bert = sizes.BERT_SIZES["tiny"]
    h, layers = bert.n_embd, bert.n_layer
    ids = torch.randint(0, bert.vocab_size, (b, s))
    small = layers * b * s * 2 * 13 * h
    attention = layers * b * s * 4 * h * s
    got = _counted(BertForPreTraining(bert), ids, torch.zeros_like(ids), torch.randint(1, s, (b, p))) + small
    assert got in (flops.bert_pretraining_forward(b, s, h, layers, bert.vocab_size, p),
                   flops.bert_pretraining_forward(b, s, h, layers, bert.vocab_size, p) - attention)
    distil = sizes.DISTILBERT_SIZES["tiny"]
    got = _counted(DistilBertForSequenceClassification(distil), ids) + small
    assert got in (flops.distilbert_classify_forward(b, s, h, layers),
                   flops.distilbert_classify_forward(b, s, h, layers) - attention)


def test_model_parameter_counts() -> None:
    from workloads.models.bert import BertForPreTraining
    from workloads.models.resnet import ResNet
    from workloads.models.unet import UNet

    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(ResNet(sizes.RESNET_SIZES["full"])) == 25_557_032  # torchvision's resnet50
    assert count(UNet(sizes.UNET_SIZES["full"])) == 31_037_633
    assert count(BertForPreTraining(sizes.BERT_SIZES["tiny"])) == sizes.bert_params(sizes.BERT_SIZES["tiny"])
