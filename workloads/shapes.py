"""DeepBench shapes of the accelerator study (studies.md, C1) as named presets. No torch.

A primitive's ``--shape deepbench-N`` picks a row; any dimension given on the
command line (a value other than -1, or a batch size / sequence length other
than 0) replaces the preset's.
"""

from __future__ import annotations

from typing import Any

GEMM: dict[str, dict[str, int]] = {
    "deepbench-0": {"m": 64, "n": 1760, "k": 1760},
    "deepbench-1": {"m": 2560, "n": 64, "k": 2560},
    "deepbench-2": {"m": 1760, "n": 128, "k": 1760},
    "deepbench-3": {"m": 2560, "n": 2560, "k": 2560},
}

# (w, h, c, b, k, fw, fh, pw, ph); stride 1.
CONV2D: dict[str, dict[str, int]] = {
    "deepbench-0": {"w": 7, "h": 7, "c": 32, "b": 131072, "k": 32, "fw": 3, "fh": 3, "pw": 0, "ph": 0},
    "deepbench-1": {"w": 14, "h": 14, "c": 128, "b": 4096, "k": 256, "fw": 3, "fh": 3, "pw": 1, "ph": 1},
    "deepbench-2": {"w": 54, "h": 54, "c": 16, "b": 256, "k": 1024, "fw": 3, "fh": 3, "pw": 1, "ph": 1},
    "deepbench-3": {"w": 128, "h": 128, "c": 32, "b": 1024, "k": 128, "fw": 5, "fh": 5, "pw": 0, "ph": 0},
}

# (w, h, c, b)
RELU: dict[str, dict[str, int]] = {
    "deepbench-0": {"w": 7, "h": 7, "c": 32, "b": 262144},
    "deepbench-1": {"w": 14, "h": 14, "c": 128, "b": 16384},
    "deepbench-2": {"w": 54, "h": 54, "c": 1024, "b": 128},
    "deepbench-3": {"w": 128, "h": 128, "c": 128, "b": 128},
}

# (steps, batch, input, hidden)
LSTM: dict[str, dict[str, int]] = {
    "deepbench-0": {"s": 50, "b": 64, "i": 256, "h": 256},
    "deepbench-1": {"s": 25, "b": 32, "i": 512, "h": 512},
    "deepbench-2": {"s": 25, "b": 16, "i": 512, "h": 512},
    "deepbench-3": {"s": 50, "b": 32, "i": 512, "h": 512},
}

PRESET_NAMES: tuple[str, ...] = ("deepbench-0", "deepbench-1", "deepbench-2", "deepbench-3")


def resolve(table: dict[str, dict[str, int]], preset: str, overrides: dict[str, Any]) -> dict[str, int]:
    """The preset's dimensions with every given override applied (-1/0/None: keep the preset's)."""
    try:
        dims = dict(table[preset])
    except KeyError:
        raise ValueError(f"unknown shape {preset!r} (known: {', '.join(table)})") from None
    for key, value in overrides.items():
        if value is None:
            continue
        value = int(value)
        # Sizes use 0 for "the preset's"; paddings use -1 (0 is a real padding).
        if value == -1 or (value == 0 and key not in ("pw", "ph")):
            continue
        dims[key] = value
    return dims
