"""FLOP formulas against values computed by hand from perf-model.md."""

from __future__ import annotations

import math

import pytest

from orchestrator.predict import memory
from workloads import flops
from workloads.models.configs import SIZES, num_params


def test_gemm() -> None:
    # DeepBench (2560, 2560, 2560): 2 * 2560^3
    assert flops.gemm(2560, 2560, 2560) == 33_554_432_000
    assert flops.gemm(64, 1760, 1760) == 2 * 64 * 1760 * 1760 == 396_492_800


def test_conv2d_deepbench_shapes() -> None:
    # (7,7,32,131072,32,3,3,0,0): Wo = Ho = (7 - 3)/1 + 1 = 5 -> 2*5*5*32*32*3*3*131072
    assert flops.conv2d(7, 7, 32, 131072, 32, 3, 3, 0, 0) == 2 * 5 * 5 * 32 * 32 * 9 * 131072 == 60_397_977_600
    # (14,14,128,4096,256,3,3,1,1): padding keeps 14x14 -> 2*14*14*256*128*9*4096
    assert flops.conv2d(14, 14, 128, 4096, 256, 3, 3, 1, 1) == 473_520_144_384
    # (128,128,32,1024,128,5,5,0,0): Wo = 124
    assert flops.conv2d(128, 128, 32, 1024, 128, 5, 5, 0, 0) == 2 * 124 * 124 * 128 * 32 * 25 * 1024
    # stride 2 on 8x8, 3x3 filter, pad 1: Wo = (8 + 2 - 3)//2 + 1 = 4
    assert flops.conv2d(8, 8, 1, 1, 1, 3, 3, 1, 1, 2, 2) == 2 * 4 * 4 * 9
    with pytest.raises(ValueError):
        flops.conv_out(2, 5, 0)


def test_relu() -> None:
    assert flops.relu(54, 54, 1024, 128) == 54 * 54 * 1024 * 128 == 382_205_952


def test_lstm_study_and_full_counts() -> None:
    # (50,64,256,256): 2*4*50*256*256*64 + 2*4*50*256*64
    assert flops.lstm(50, 64, 256, 256) == 1_677_721_600 + 6_553_600
    assert flops.lstm_full(50, 64, 256, 256) == 2 * 4 * 50 * 64 * 256 * 512 == 3_355_443_200
    # second layer takes h inputs
    assert flops.lstm(25, 32, 512, 256, layers=2) == (2 * 4 * 25 * 512 * 256 * 32 + 2 * 4 * 25 * 256 * 32) + (
        2 * 4 * 25 * 256 * 256 * 32 + 2 * 4 * 25 * 256 * 32)


def test_transformer_block_gpt2_xl() -> None:
    h, s, b = 1600, 1024, 8
    n_layer = 12 * h * h + 13 * h  # 30,740,800
    assert flops.transformer_layer_params(h) == 30_740_800
    assert flops.transformer_block_forward(b, s, h) == b * s * (2 * 30_740_800 + 4 * 1600 * 1024)
    assert flops.transformer_block_forward(b, s, h) == 557_344_358_400
    assert flops.transformer_block_backward(b, s, h) == 2 * 557_344_358_400
    # fwd + bwd per token = 6 N_layer + 12 h s: one layer's share of the model formula
    per_token = (flops.transformer_block_forward(1, s, h) + flops.transformer_block_backward(1, s, h)) / s
    assert per_token == flops.gpt_train_flops_per_token(n_layer, 1, h, s)


def test_gpt2_params_and_flops_per_token() -> None:
    gpt2 = SIZES["gpt2"]
    # 50257*768 + 12*(12*768^2 + 13*768) + 2*768 = 123,653,376 (124,439,808 with the 1024x768 positions)
    assert num_params(gpt2) == 123_653_376
    assert num_params(gpt2, include_position=True) == 124_439_808
    assert flops.gpt_train_flops_per_token(123_653_376, 12, 768, 1024) == 6 * 123_653_376 + 12 * 12 * 768 * 1024
    assert flops.gpt_train_flops_per_token(123_653_376, 12, 768, 1024) == 855_166_464
    xl = SIZES["gpt2-xl"]
    assert 1.55e9 < num_params(xl) < 1.56e9
    assert 6.6e9 < num_params(SIZES["gpt3-6.7b"]) < 6.7e9


def test_megatron_form_agrees_with_6n_plus_attention() -> None:
    cfg = SIZES["gpt2-xl"]
    b, s = 8, 1024
    ours = flops.gpt_train_flops_per_token(num_params(cfg), cfg.n_layer, cfg.n_embd, s) * b * s
    megatron = flops.megatron_flops_per_iteration(b, s, cfg.n_layer, cfg.n_embd, cfg.vocab_size)
    assert math.isclose(ours, megatron, rel_tol=1e-3)  # differ only by biases and LayerNorms


def test_allreduce_bus_bandwidth() -> None:
    assert flops.allreduce_bus_factor(1) == 0
    assert flops.allreduce_bus_factor(2) == 1
    assert flops.allreduce_bus_factor(8) == 1.75
    algbw, busbw = flops.allreduce_bandwidths(16_777_216 * 4, 0.001, 4)
    assert algbw == 67_108_864_000 and busbw == algbw * 1.5


def test_memory_model_states() -> None:
    n = 1_000_000
    assert memory.model_state_bytes(n, "ddp", 8, "bf16") == 16 * n
    assert memory.model_state_bytes(n, "zero1", 8, "bf16") == 4 * n + 12 * n / 8
    assert memory.model_state_bytes(n, "zero2", 8, "fp16") == 2 * n + 14 * n / 8
    assert memory.model_state_bytes(n, "zero3", 8, "bf16") == memory.model_state_bytes(n, "fsdp-full", 8, "bf16")
    assert memory.model_state_bytes(n, "zero3", 8, "bf16") == 2 * n
    small = memory.gpt_training({"model": "gpt2", "batch_size": 1, "seq_len": 1024, "precision": "fp16"})
    big = memory.gpt_training({"model": "gpt3-6.7b", "batch_size": 1, "seq_len": 1024, "precision": "fp16"})
    assert 2e9 < small < 5e9 and big > 100e9  # 6.7B with DDP cannot fit an 80 GB device
