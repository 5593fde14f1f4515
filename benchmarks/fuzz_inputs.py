"""Fuzz `orch plan` and `orch sites show` with generated hostile sweep files and site profiles.

    .venv/bin/python -m benchmarks.fuzz_inputs --count 5000 --seed 1 [--workers N] [--json] [--keep DIR]
        [--subprocess-sample N] [--only deep-sweep,...]

Generators (each case is one file):
  grammar-sweep   a sweep with a valid shape and random values: wrong types, huge/negative/NaN numbers,
                  unicode, control characters, long strings, deep nesting, aliases/merge keys, tags,
                  random keys, and shell snippets that would create a CANARY file if anything ran them
  deep-sweep      a sweep valid in structure, of a real workload (the registry's parameters and
                  choices, its strategies, several sites), with some values hostile within their
                  type (shell syntax and odd characters in text, extreme numbers): most get past
                  validation to resolve, render and `bash -n`, where grammar cases rarely do
  grammar-site    the same for a site profile (built from sites/local.yaml's shape)
  mutate-example  byte-level mutations of examples/*.yaml
  mutate-site     byte-level mutations of sites/*.yaml
  special         empty, BOM, CRLF, NUL, invalid UTF-8, files around the 4 MiB boundary

Each case runs in a fresh ORCH_HOME and working directory: `orch plan FILE --dry-run` (every fourth
case with `--json --show`, its scripts checked with `bash -n`); a profile goes in a temp
`--sites-dir` and runs `orch sites show NAME` and `orch plan` of a tiny sweep naming it. Outcomes:
ok (exit 0), clean (exit 2 with exactly one `error:` line, no traceback), traceback, hang
(timeout), blowup (MemoryError or killed), execution (a CANARY file appeared under the case's
directory), other (any other exit status or error shape).

Why in-process by default: a new interpreter per invocation costs ~0.4 s of imports, so 5,000
cases x up to 3 invocations would take an hour on 2 cores. Workers import orch once and call
`orchestrator.cli.app.main()` with sys.argv set, stdout/stderr captured. `--subprocess-sample N`
re-runs N cases as real processes (RLIMIT_AS via preexec_fn, a timeout) and reports any case whose
class differs, so the in-process shortcut is checked against the real CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
MEM_LIMIT = 2 << 30  # RLIMIT_AS: a blow-up ends as MemoryError, not as this machine swapping
TIMEOUT_S = 20.0
FOUR_MIB = 4 << 20
CLASSES = ("ok", "clean", "traceback", "hang", "blowup", "execution", "other")
BAD = {"traceback", "hang", "blowup", "execution", "other"}

# Shell snippets: each would create a file whose name starts with CANARY if a shell ever ran the value.
CANARIES = ["$(touch CANARY1)", "; touch CANARY2", "`touch CANARY3`", "&& touch CANARY4 #", "| touch CANARY5",
            "\ntouch CANARY6\n", "'; touch CANARY7; '", "\"$(touch CANARY8)\"", "${IFS}touch${IFS}CANARY9",
            "{{ ''.__class__ }}$(touch CANARY10)", "%(touch CANARY11)s", "\x00$(touch CANARY12)"]
UNICODE = ["é", "名前", "\u202e", "\u200b", "\ufeff", "𝔘", "\U0001F600", "\ud800", "Ω≈ç", "\u0085", "\u2028"]
CONTROL = [chr(c) for c in (0, 1, 7, 8, 9, 10, 11, 12, 13, 27, 127)]
KEYS = ["name", "experiments", "workload", "sites", "walltime", "grid", "zip", "exclude", "variants", "retry",
        "site_overrides", "over_walltime", "queue", "check_memory", "share", "devices", "precision", "strategy",
        "batch_size", "seq_len", "repeats", "model", "env", "setup", "python_env", "description", "m", "n", "k",
        "iters", "warmup", "min_time", "max_attempts", "failures", "kind", "prefix"]
WORKLOADS = ["gemm", "gpt2", "allreduce", "conv", "bogus", ""]
SITES = ["local", "polaris", "baskerville", "alcf-ai-testbed:sambanova", "nowhere", "local:x"]


@dataclass
class Case:
    id: int
    generator: str
    kind: str  # "sweep" or "site"
    data: bytes
    site_name: str = ""
    show: bool = False


@dataclass
class Outcome:
    id: int
    generator: str
    kind: str
    cls: str
    detail: str = ""
    seconds: float = 0.0
    invocations: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------- value grammar

def _scalar(rng: random.Random) -> Any:
    pick = rng.randrange(16)
    if pick == 0:
        return rng.choice([10**rng.randrange(1, 400), -(10**rng.randrange(1, 40)), 2**63, -(2**63) - 1, 0, -1])
    if pick == 1:
        return rng.choice([float("nan"), float("inf"), -float("inf"), 1e308, -0.0, 5e-324, 1e-9])
    if pick == 2:
        return rng.choice(CANARIES)
    if pick == 3:
        alphabet = UNICODE + CONTROL + ["a", " ", ":", "#", "{", "-"]
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 20)))
    if pick == 4:
        return rng.choice(["x" * rng.choice([255, 256, 4096, 65537, 1 << 20]), "a b" * 1000])
    if pick == 5:
        return rng.choice([True, False, None, "", "null", "~", "yes", "no", "on", "0x10", "1e3", "0o7", ".inf"])
    if pick == 6:
        return rng.choice(["00:10:00", "1-00:00:00", "99:99:99", "-1", "auto", "00:00:00", "25:61:61", "1e9", "10"])
    if pick == 7:
        return rng.choice(["fp32", "bf16", "fp8", "FP32", "int4", "tf32 "])
    if pick == 8:
        return rng.choice(WORKLOADS + SITES)
    if pick == 9:
        return rng.randrange(-5, 5000)
    if pick == 10:
        return rng.choice(["../../etc/passwd", "/dev/zero", "~/x", "$HOME/x", "a/../../b", "/proc/self/mem"])
    if pick == 11:
        return rng.choice(["{{ 7*7 }}", "{% for x in y %}", "${X}", "%s%n", "\\", "'", "\""])
    return rng.choice([1, 2, 4, 8, "a", 0.5, "local", "gemm"])


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(10)
    if depth > 4 or pick < 6:
        return _scalar(rng)
    if pick < 8:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    return {_key(rng): _value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}


def _key(rng: random.Random) -> Any:
    pick = rng.randrange(8)
    if pick < 5:
        return rng.choice(KEYS)
    if pick == 5:
        return rng.choice([1, 2.5, True, None])  # non-string keys: YAML allows them, pydantic may not
    return str(_scalar(rng))[:40]


class FuzzRng(random.Random):
    """A case's random source, with its hostility: the chance each field is replaced by a random value.
    Mostly-valid cases (few replaced fields) are the ones that reach resolve and render."""

    hostility: float = 0.25


def _hostility(rng: random.Random) -> float:
    return getattr(rng, "hostility", 0.25)


def _maybe(rng: random.Random, good: Any, p: float | None = None) -> Any:
    """A valid value most of the time, so the hostile ones reach the deeper stages."""
    chance = p if p is not None else _hostility(rng)
    return _value(rng) if rng.random() < chance else good


def _mkey(rng: random.Random, good: str) -> Any:
    """A mapping key: valid, or a random (hashable) one."""
    return _key(rng) if rng.random() < 0.25 else good


def grammar_sweep(rng: random.Random) -> dict[str, Any]:
    grid: dict[Any, Any] = {"devices": _maybe(rng, [1, 2]), "precision": _maybe(rng, ["fp32"]),
                            "warmup": _maybe(rng, 1), "iters": _maybe(rng, 2)}
    for _ in range(rng.randrange(0, 3)):
        grid[_key(rng)] = _value(rng)
    exp: dict[Any, Any] = {"name": _maybe(rng, "e1"), "workload": _maybe(rng, "gemm"),
                           "sites": _maybe(rng, ["local"]), "walltime": _maybe(rng, "00:05:00"), "grid": grid}
    if rng.random() < 0.4:
        exp["zip"] = {"shape": {"m": _maybe(rng, [64, 128]), "n": _maybe(rng, [64, 128]), "k": _maybe(rng, [64, 64])}}
    if rng.random() < 0.3:
        exp["exclude"] = [_maybe(rng, {"devices": 2})]
    if rng.random() < 0.3:
        exp["site_overrides"] = {_mkey(rng, "local"): {"env": {_mkey(rng, "X"): _value(rng)},
                                                       "setup": [_value(rng), rng.choice(CANARIES)]}}
    for key in ("queue", "check_memory", "share", "over_walltime"):
        if rng.random() < 0.15:
            exp[key] = _value(rng)
    sweep: dict[Any, Any] = {"name": _maybe(rng, "fz"), "experiments": _maybe(rng, [exp], _hostility(rng) / 3)}
    if rng.random() < 0.3:
        sweep["retry"] = {"max_attempts": _maybe(rng, 2), "failures": _maybe(rng, ["timeout"])}
    if rng.random() < 0.3:
        sweep["variants"] = {_mkey(rng, "tiny"): {"sites": _maybe(rng, ["local"]), "grid": {"devices": _value(rng)}}}
    if rng.random() < 0.2:
        venv = {"kind": "venv", "prefix": rng.choice(CANARIES)}
        sweep["site_overrides"] = {"local": {"env": {"A": rng.choice(CANARIES)}, "setup": [rng.choice(CANARIES)],
                                             "python_env": _maybe(rng, venv)}}
    if rng.random() < 0.2:
        sweep[_key(rng)] = _value(rng)
    return sweep


# Sites whose profiles resolve on this machine with no environment (no account needed to plan).
DEEP_SITES = ["local", "polaris", "perlmutter", "lumi", "dawn", "jade2", "stanage", "cosma8", "dgx"]
# What a valid value of one parameter's type may be when made hostile but still of its type.
HOSTILE_INTS = [0, 1, -1, 2 ** 31, 2 ** 53, -(2 ** 63), 2 ** 63 - 1, 7]
HOSTILE_FLOATS = [0.0, -0.0, 1e-300, 1e300, -1.5, 3.0]


def _hostile_text(rng: random.Random) -> str:
    parts = [rng.choice(CANARIES), rng.choice(UNICODE + ["x", "-rf", "--output", "'", '"', "\\", "%s", "{{x}}"])]
    rng.shuffle(parts)
    return "".join(parts)


def deep_sweep(rng: random.Random) -> dict[str, Any]:
    """A sweep valid in its structure, of a real workload with parameters of the right types, with
    a few values made hostile within their type: text carrying shell syntax and odd characters,
    numbers at their extremes. Most reach resolve, render and `bash -n` (grammar cases rarely do)."""
    from workloads.registry import WORKLOADS

    workload = rng.choice([w for w in WORKLOADS.values() if w.name != "probe"])
    grid: dict[str, Any] = {"devices": rng.choice([1, [1, 2], [1, 4], 8]),
                            "precision": rng.sample(list(workload.precisions), k=rng.randint(1, 2)),
                            "warmup": 1, "iters": 2}
    for param in workload.params:
        if param.name in ("warmup", "iters") or rng.random() < 0.5:
            continue
        hostile = rng.random() < 0.3
        if param.choices:
            value: Any = rng.choice(list(param.choices)) if not hostile else _hostile_text(rng)
        elif param.type is bool:
            value = rng.random() < 0.5
        elif param.type is int:
            value = rng.choice(HOSTILE_INTS) if hostile else rng.choice([1, 2, 64, 128])
        elif param.type is float:
            value = rng.choice(HOSTILE_FLOATS) if hostile else 0.5
        else:
            value = _hostile_text(rng) if hostile else "fz"
        grid[param.name] = value if rng.random() < 0.7 else [value, param.default]
    if len(workload.strategies) > 1 and rng.random() < 0.7:
        grid["strategy"] = rng.sample(list(workload.strategies), k=rng.randint(1, 3))
    exp: dict[str, Any] = {"name": rng.choice(["e", "e-1", "exp_" + str(rng.randrange(100))]),
                           "workload": workload.name,
                           "sites": rng.sample(DEEP_SITES, k=rng.randint(1, 3)),
                           "walltime": rng.choice(["00:05:00", 10, "1:00:00", "2-00:00:00"]), "grid": grid}
    if rng.random() < 0.3:
        exp["over_walltime"] = rng.choice(["warn", "skip"])
    if rng.random() < 0.3:
        exp["share"] = rng.random() < 0.5
    sweep: dict[str, Any] = {"name": rng.choice(["deep", "deep-fz", "d_" + str(rng.randrange(1000))]),
                             "experiments": [exp]}
    if rng.random() < 0.4:
        site = rng.choice(exp["sites"])
        sweep["site_overrides"] = {site: {"env": {"FZ_VAR": _hostile_text(rng)},
                                          "setup": [f"echo {_hostile_text(rng)}"]}}
    if rng.random() < 0.3:
        sweep["retry"] = {"max_attempts": rng.randint(1, 4), "failures": ["timeout"]}
    return sweep


def grammar_site(rng: random.Random, name: str) -> dict[str, Any]:
    site: dict[Any, Any] = {
        "name": _maybe(rng, name, _hostility(rng) / 3), "description": _maybe(rng, "fuzz"),
        "scheduler": _maybe(rng, "local"),
        "max_nodes": _maybe(rng, 1),
        "device": {"type": _maybe(rng, "cpu"), "model": _maybe(rng, "host-cpu"), "per_node": _maybe(rng, 4),
                   "precisions": _maybe(rng, ["fp32"])},
        "queues": [{"name": _maybe(rng, "q"), "max_nodes": _maybe(rng, 1), "max_walltime": _maybe(rng, "04:00:00")}],
        "launcher": {"name": _maybe(rng, "torchrun")},
        "python_env": _maybe(rng, {"kind": "none"}),
    }
    if rng.random() < 0.5:
        site["env"] = {_mkey(rng, "V"): rng.choice(CANARIES + [_scalar(rng)])}
    if rng.random() < 0.5:
        site["setup"] = [rng.choice(CANARIES), _scalar(rng)]
    if rng.random() < 0.3:
        site["price"] = {"per_device_hour": _maybe(rng, 0.1), "currency": _maybe(rng, "USD")}
    if rng.random() < 0.3:
        site["network"] = {"fast_domain": _maybe(rng, 4), "fast_gbs": _maybe(rng, 5), "latency_us": _maybe(rng, 20),
                           "inter_node_gbs": _maybe(rng, 1)}
    if rng.random() < 0.3:
        site[_key(rng)] = _value(rng)
    return site


# ---------------------------------------------------------------- YAML text with the hostile shapes

def _yaml_scalar(value: Any, rng: random.Random) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        if value != value:
            return rng.choice([".nan", ".NaN"])
        if value in (float("inf"), -float("inf")):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    text = str(value)
    style = rng.randrange(4)
    if style == 0 and text and all(c.isalnum() or c in "._-/ " for c in text) and not text[0].isdigit():
        return text  # plain
    if style == 1 and "'" not in text and all(c.isprintable() for c in text):
        return f"'{text}'"
    # JSON's escapes are YAML double-quoted escapes, surrogates included as \\ud800 (a YAML error, as wanted).
    return json.dumps(text, ensure_ascii=rng.random() < 0.5)


def _flow(value: Any, rng: random.Random) -> str:
    return json.dumps(value, default=str) if isinstance(value, (dict, list)) else _yaml_scalar(value, rng)


def to_yaml(value: Any, rng: random.Random, indent: int = 0) -> str:
    """Block YAML, with flow collections, tags, anchors and deep nesting thrown in at random."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        if rng.random() < 0.1:
            return json.dumps(value, default=str) if rng.random() < 0.5 else "{" + ", ".join(
                f"{_yaml_scalar(k, rng)}: {_flow(v, rng)}" for k, v in value.items()) + "}"
        lines = []
        for k, v in value.items():
            key = _yaml_scalar(k, rng)
            body = to_yaml(v, rng, indent + 2)
            tag = rng.choice(["!!str ", "!!int ", "!!python/object:os.system ", "!custom ", "!!binary ", "!!float "]) \
                if rng.random() < 0.005 else ""
            if isinstance(v, (dict, list)) and v and not body.startswith(("{", "[")):
                lines.append(f"{pad}{key}:\n{body}")
            else:
                lines.append(f"{pad}{key}: {tag}{body}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value or rng.random() < 0.3:
            try:
                return "[" + ", ".join(_yaml_scalar(v, rng) if not isinstance(v, (dict, list))
                                       else json.dumps(v, default=str) for v in value) + "]"
            except ValueError:  # NaN inside json.dumps of a nested value: fine, json writes NaN
                return "[]"
        out = []
        for v in value:
            body = to_yaml(v, rng, indent + 2)
            out.append(f"{pad}- {body.lstrip()}" if isinstance(v, dict) and v and not body.startswith("{")
                       else f"{pad}- {body}")
        return "\n".join(out)
    return _yaml_scalar(value, rng)


def _yaml_tricks(text: str, rng: random.Random) -> str:
    """Shapes a dict cannot express: anchors, aliases, merge keys, billion laughs, deep nesting."""
    pick = rng.randrange(8)
    if pick == 0:  # billion laughs: each alias level multiplies; a loader that expands it blows up
        levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        levels += [f"a{i}: &a{i} [{', '.join(['*a' + str(i - 1)] * 10)}]" for i in range(1, rng.randrange(4, 10))]
        return "\n".join(levels) + "\n" + text
    if pick == 1:  # merge key into the first experiment
        return "defaults: &d {walltime: '00:05:00', sites: [local], workload: gemm}\n" + text.replace(
            "experiments:\n", "experiments:\n  - <<: *d\n    name: merged\n    grid: {devices: 1}\n", 1)
    if pick == 2:  # deep nesting
        depth = rng.choice([50, 500, 5000, 50000])
        return text + "\nextra: " + "[" * depth + "]" * depth + "\n"
    if pick == 3:
        depth = rng.choice([100, 1000])
        return text + "\n" + "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v: 1\n"
    if pick == 4:  # duplicate keys
        return text + "\nname: again\n"
    if pick == 5:  # recursive alias
        return "r: &r [*r]\n" + text
    if pick == 6:  # several documents
        return text + "\n---\n" + text
    return text


# ---------------------------------------------------------------- byte mutations and special files

def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 8)):
        op = rng.randrange(9)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] = rng.randrange(256)
        elif op == 1:
            buf[pos:pos] = rng.choice([b"\x00", b"\xff\xfe", b"\xc3", b"\t", b"\r", b":", b"- ", b"&a ", b"*a",
                                       b"!!python/object/apply:os.system ['touch CANARY13']", b"{", b"[", b"'", b'"',
                                       b"<<: *x", b"%YAML 1.1\n", b"\n---\n", rng.choice(CANARIES).encode()])
        elif op == 2 and buf:
            del buf[pos:pos + rng.randrange(1, 64)]
        elif op == 3 and buf:
            start = rng.randrange(len(buf))
            chunk = buf[start:start + rng.randrange(1, 200)]
            buf[pos:pos] = chunk * rng.randrange(1, 50)
        elif op == 4:  # a number made huge, negative or NaN
            buf[pos:pos] = rng.choice([b"9" * 400, b"-1", b".nan", b"1e999", b"-0", b"0x7fffffffffffffff"])
        elif op == 5:  # indentation shifted
            buf[pos:pos] = b" " * rng.randrange(1, 9)
        elif op == 6 and buf:  # a line swapped with another
            lines = bytes(buf).split(b"\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            buf = bytearray(b"\n".join(lines))
        elif op == 7:
            buf[pos:pos] = rng.choice(UNICODE + CONTROL).encode("utf-8", "surrogatepass")
        else:
            new = rng.choice([b"LOCAL", b"loc al", b"local:none", b"$(touch CANARY14)"])
            buf = bytearray(bytes(buf).replace(b"local", new, 1))
    return bytes(buf)


def special_files(base: bytes) -> list[bytes]:
    big_line = b"# " + b"x" * 100 + b"\n"
    pad = big_line * (FOUR_MIB // len(big_line) + 1)
    return [
        b"", b"\n", b" ", b"---\n", b"~\n", b"null\n", b"[]\n", b"42\n", b'"s"\n', b"\x00",
        b"\xef\xbb\xbf" + base, base.replace(b"\n", b"\r\n"), base.replace(b"\n", b"\r"), base + b"\x00",
        base[: len(base) // 2] + b"\x00" + base[len(base) // 2:], b"\xff\xfe" + base.decode().encode("utf-16-le"),
        base + b"\xc3\x28\n", b"\x80\x81" + base, base.replace(b"gemm", b"ge\xffmm", 1),
        (base + pad)[: FOUR_MIB - 1], (base + pad)[:FOUR_MIB], (base + pad)[: FOUR_MIB + 1],
        base + b"description: " + b"y" * FOUR_MIB + b"\n", b"\t" + base, base.replace(b"  ", b"\t"),
        base + b"\n" * 100000, b"%TAG ! tag:yaml.org,2002:python/\n---\n!object/apply:os.system ['touch CANARY15']\n",
    ]


# ---------------------------------------------------------------- the case stream

def _examples(pattern: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted((REPO / pattern.split("/")[0]).glob(pattern.split("/")[1]))]


def generate(count: int, seed: int) -> Iterator[Case]:
    """Deterministic per (seed, index): case i is the same whatever the count, so a seed range can be re-run."""
    examples, sites = _examples("examples/*.yaml"), _examples("sites/*.yaml")
    local = (REPO / "sites" / "local.yaml").read_bytes()
    quick = (REPO / "examples" / "quickstart.yaml").read_bytes()
    specials = special_files(quick)
    gens: list[tuple[str, float]] = [("grammar-sweep", 0.25), ("deep-sweep", 0.2), ("grammar-site", 0.12),
                                     ("mutate-example", 0.23), ("mutate-site", 0.12), ("special", 0.08)]
    for i in range(count):
        rng = FuzzRng(f"{seed}:{i}")
        rng.hostility = rng.choice([0.02, 0.08, 0.25])
        gen = rng.choices([g for g, _ in gens], [w for _, w in gens])[0]
        show = rng.random() < 0.25
        name = f"fz{i}"
        if gen == "grammar-sweep":
            text = _yaml_tricks(to_yaml(grammar_sweep(rng), rng) + "\n", rng) if rng.random() < 0.3 \
                else to_yaml(grammar_sweep(rng), rng) + "\n"
            yield Case(i, gen, "sweep", text.encode("utf-8", "surrogatepass"), show=show)
        elif gen == "deep-sweep":
            text = to_yaml(deep_sweep(rng), rng) + "\n"
            yield Case(i, gen, "sweep", text.encode("utf-8", "surrogatepass"), show=rng.random() < 0.6)
        elif gen == "grammar-site":
            text = to_yaml(grammar_site(rng, name), rng) + "\n"
            if rng.random() < 0.2:
                text = _yaml_tricks(text, rng)
            yield Case(i, gen, "site", text.encode("utf-8", "surrogatepass"), site_name=name, show=show)
        elif gen == "mutate-example":
            yield Case(i, gen, "sweep", mutate(rng.choice(examples), rng), show=show)
        elif gen == "mutate-site":
            src = rng.choice(sites + [local])
            # Renamed so `sites show NAME` finds it in the temp --sites-dir (a profile's name is its file's).
            renamed = re.sub(rb"(?m)^name: .*$", f"name: {name}".encode(), src, count=1)
            yield Case(i, gen, "site", mutate(renamed, rng), site_name=name, show=show)
        else:
            data = specials[rng.randrange(len(specials))]
            if rng.random() < 0.3:
                yield Case(i, gen, "site", data.replace(b"quickstart", name.encode()), site_name=name, show=show)
            else:
                yield Case(i, gen, "sweep", data, show=show)


# ---------------------------------------------------------------- running one case

def _tiny_sweep(site: str) -> str:
    return (f"name: fztiny\nexperiments:\n  - name: e\n    workload: gemm\n    sites: [{json.dumps(site)}]\n"
            "    walltime: '00:05:00'\n    grid: {devices: 1, precision: fp32, iters: 1, warmup: 0}\n"
            "    zip: {shape: {m: [64], n: [64], k: [64]}}\n")


def _argvs(case: Case, root: Path) -> list[list[str]]:
    flags = ["--json", "--show"] if case.show else []
    if case.kind == "sweep":
        path = root / "sweep.yaml"
        path.write_bytes(case.data)
        return [["plan", str(path), "--dry-run", *flags]]
    sites_dir = root / "sites"
    sites_dir.mkdir()
    (sites_dir / f"{case.site_name}.yaml").write_bytes(case.data)
    tiny = root / "tiny.yaml"
    tiny.write_text(_tiny_sweep(case.site_name))
    return [["--sites-dir", str(sites_dir), "sites", "show", case.site_name],
            ["--sites-dir", str(sites_dir), "plan", str(tiny), "--dry-run", *flags]]


def classify(rc: int | None, out: str, err: str) -> tuple[str, str]:
    if rc is None:
        return "hang", ""
    text = out + err
    if "MemoryError" in text or rc in (-9, 137):
        return "blowup", text.strip().splitlines()[-1][:300] if text.strip() else f"rc {rc}"
    if "Traceback" in text:
        return "traceback", text.strip().splitlines()[-1][:300]
    if rc == 0:
        return "ok", ""
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    # A usage error from click (exit 2, "Usage: ... Error: ...") is not one `error:` line either.
    if rc == 2 and len(errors) == 1 and not any(ln.startswith(("Error", "Usage")) for ln in err.splitlines()):
        return "clean", errors[0][:300]
    return "other", f"rc {rc}: {(err or out).strip()[-300:]}"


class _Timeout(BaseException):
    """BaseException: orch's own `except Exception` must not swallow the alarm."""


def _alarm(_sig: int, _frame: Any) -> None:
    raise _Timeout()


def _in_process(argv: list[str], timeout: float) -> tuple[int | None, str, str]:
    from orchestrator.cli.app import main
    out, err = io.StringIO(), io.StringIO()
    rc: int | None = 0
    old_argv = sys.argv
    sys.argv = ["orch", *argv]
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if not isinstance(exc.code, (int, type(None))):
                    err.write(str(exc.code) + "\n")
            except _Timeout:
                rc = None
            except MemoryError:
                err.write("MemoryError\n")
                rc = 1
            except Exception:  # what the real CLI would print as a traceback
                import traceback
                err.write(traceback.format_exc())
                rc = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.argv = old_argv
    return rc, out.getvalue(), err.getvalue()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEM_LIMIT, MEM_LIMIT))


def _subprocess(argv: list[str], timeout: float, env: dict[str, str], cwd: Path) -> tuple[int | None, str, str]:
    try:
        proc = subprocess.run([PY, "-m", "orchestrator.cli", *argv], capture_output=True, timeout=timeout, env=env,
                              cwd=cwd, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        return None, "", ""
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def _bash_n(out: str) -> str:
    """`bash -n` over each script of `plan --json --show`: a quoting slip is a syntax error there."""
    try:
        scripts = json.loads(out).get("scripts", {})
    except (ValueError, AttributeError):
        return ""
    for run_id, script in [(r, s) for r, s in scripts.items() if s][:4]:  # a skipped run has none
        proc = subprocess.run(["bash", "-n"], input=script.encode(), capture_output=True, timeout=20)
        if proc.returncode != 0:
            return f"bash -n {run_id}: {proc.stderr.decode(errors='replace').strip()[:200]}"
    return ""


def run_case(case: Case, mode: str = "inproc", timeout: float = TIMEOUT_S) -> Outcome:
    start = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"fz{case.id}-"))
    home = root / "home"
    home.mkdir()
    # Memory tracing off (the formulas instead): a trace runs the workload's program on fake tensors,
    # seconds per new shape, and is not input handling; the deep cases' many gpt2 shapes would
    # otherwise turn the campaign into a tracing benchmark and its alarms into false hangs.
    env = {**os.environ, "ORCH_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200", "ORCH_MEMORY_TRACE": "0"}
    env.pop("ORCH_SITES_PATH", None)
    env.pop("ORCH_DB_URL", None)
    result = Outcome(case.id, case.generator, case.kind, "ok")
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    try:
        argvs = _argvs(case, root)
        if mode == "inproc":  # the canaries' relative paths land in root, as for a subprocess with cwd=root
            os.chdir(root)
            os.environ.clear()
            os.environ.update(env)
        for argv in argvs:
            rc, out, err = _in_process(argv, timeout) if mode == "inproc" else _subprocess(argv, timeout, env, root)
            cls, detail = classify(rc, out, err)
            if cls == "ok" and case.show and argv[-1] == "--show":
                bad = _bash_n(out)
                if bad:
                    cls, detail = "other", bad
            result.invocations.append({"argv": argv, "rc": rc, "class": cls, "detail": detail})
            if CLASSES.index(cls) > CLASSES.index(result.cls):
                result.cls, result.detail = cls, detail
        canaries = [str(p.relative_to(root)) for p in root.rglob("CANARY*")]
        if canaries:
            result.cls, result.detail = "execution", ", ".join(canaries)
    finally:
        if mode == "inproc":
            os.chdir(old_cwd)
            os.environ.clear()
            os.environ.update(old_env)
        shutil.rmtree(root, ignore_errors=True)
    result.seconds = time.monotonic() - start
    return result


def _worker_init() -> None:
    _limit_memory()
    os.environ["NO_COLOR"] = "1"
    # Pool workers are daemonic and may not start children; `orch plan` does (a process pool for
    # memory traces), which `orch` run as a program may. Without this, in-process mode would report
    # tracebacks the real CLI never has.
    multiprocessing.current_process()._config["daemon"] = False  # type: ignore[attr-defined]
    import orchestrator.cli.app  # noqa: F401  (imported once per worker: the point of in-process mode)


def _run_inproc(case: Case, timeout: float = TIMEOUT_S) -> Outcome:
    return run_case(case, "inproc", timeout)


# ---------------------------------------------------------------- the campaign

def run_all(cases: list[Case], workers: int, progress: Callable[[int, int], None] | None = None,
            timeout: float = TIMEOUT_S) -> list[Outcome]:
    """Each case in a pool of in-process workers; a case whose worker died (killed for memory) is a blowup.
    ``timeout``: seconds after which a case is a hang (a busy machine needs more than a quiet one)."""
    results: dict[int, Outcome] = {}
    # Spawned, not forked: a fork of a process that holds torch's threads (pytest's, after other
    # tests) can crash in the child, and the child's 2 GiB address-space limit would count the
    # parent's whole mapped torch; a spawned worker starts small and imports only orch.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_worker_init, maxtasksperchild=200) as pool:
        pending = {c.id: pool.apply_async(_run_inproc, (c, timeout)) for c in cases}
        by_id = {c.id: c for c in cases}
        deadline_per = timeout * 3 + 30
        for n, (cid, fut) in enumerate(pending.items(), 1):
            try:
                results[cid] = fut.get(timeout=deadline_per + timeout * workers)
            except multiprocessing.TimeoutError:  # the worker hung past its alarm, or died
                c = by_id[cid]
                results[cid] = Outcome(cid, c.generator, c.kind, "blowup", "worker lost (killed or stuck)")
            if progress:
                progress(n, len(cases))
    return [results[c.id] for c in cases]


def _save(case: Case, outcome: Outcome, keep: Path) -> str:
    keep.mkdir(parents=True, exist_ok=True)
    path = keep / f"{outcome.cls}-{case.generator}-{case.id}.yaml"
    path.write_bytes(case.data)
    (keep / f"{path.stem}.json").write_text(json.dumps(asdict(outcome), indent=1))
    return str(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first case index (re-run a range)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--only", help="run only the cases of these generators (comma-separated, e.g. deep-sweep)")
    ap.add_argument("--subprocess-sample", type=int, default=20,
                    help="re-run this many cases as real processes and compare classes")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    cases = [c for c in generate(args.start + args.count, args.seed) if c.id >= args.start]
    if args.only:
        cases = [c for c in cases if c.generator in args.only.split(",")]

    def progress(n: int, total: int) -> None:
        if not args.json and (n % 250 == 0 or n == total):
            print(f"  {n}/{total} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)

    outcomes = run_all(cases, args.workers, progress)
    elapsed = time.monotonic() - t0
    mismatches = []
    sample = random.Random(args.seed).sample(cases, min(args.subprocess_sample, len(cases)))
    for case in sample:
        sub = run_case(case, "subprocess")
        inproc = outcomes[cases.index(case)]
        if sub.cls != inproc.cls:
            mismatches.append({"id": case.id, "inproc": inproc.cls, "subprocess": sub.cls, "detail": sub.detail})
    by_id = {c.id: c for c in cases}
    kept = {o.id: _save(by_id[o.id], o, args.keep) for o in outcomes if args.keep and o.cls not in ("ok", "clean")}
    table = Counter((o.generator, o.cls) for o in outcomes)
    gens = sorted({o.generator for o in outcomes})
    summary = {"count": len(cases), "seed": args.seed, "start": args.start, "workers": args.workers,
               "seconds": round(elapsed, 1), "classes": dict(Counter(o.cls for o in outcomes)),
               "by_generator": {g: {c: table[(g, c)] for c in CLASSES if table[(g, c)]} for g in gens},
               "subprocess_sample": len(sample), "mismatches": mismatches,
               "bad": [{"id": o.id, "generator": o.generator, "class": o.cls, "detail": o.detail,
                        "reproducer": kept.get(o.id, "")} for o in outcomes if o.cls in BAD]}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"{'generator':16}" + "".join(f"{c:>10}" for c in CLASSES))
        for g in gens:
            print(f"{g:16}" + "".join(f"{table[(g, c)]:>10}" for c in CLASSES))
        print(f"{'total':16}" + "".join(f"{summary['classes'].get(c, 0):>10}" for c in CLASSES))
        print(f"{len(cases)} cases, seed {args.seed}, {elapsed:.0f} s on {args.workers} workers; "
              f"subprocess sample {len(sample)}, {len(mismatches)} class mismatch(es)")
        for m in mismatches:
            print(f"  mismatch: case {m['id']}: in-process {m['inproc']}, subprocess {m['subprocess']}: {m['detail']}")
        for b in summary["bad"]:
            print(f"  {b['class']}: case {b['id']} ({b['generator']}): {b['detail']} {b['reproducer']}")
    return 1 if summary["bad"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
