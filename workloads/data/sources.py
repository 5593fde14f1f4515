"""Where a language model's tokens come from.

- ``synthetic``: uniform random token ids, made on the device once (a small pool
  reused every step, so random-number generation is not timed). No epochs.
- ``text``: the corpus shipped in ``workloads/data/corpus.txt`` (0.6 MiB), held
  in memory, byte-level tokens (ids 0..255).
- ``file:/path``: a large file streamed from disk through ``numpy.memmap`` (read
  as each batch needs it, never loaded whole): ``*.bin`` is nanoGPT's format
  (uint16 GPT-2 token ids, e.g. OpenWebText's train.bin), anything else bytes.
  ``file:@corpus`` streams the shipped corpus from disk the same way (the
  streaming path, runnable anywhere: rehearsals and tests).
- genomes (GenSLM): rows of codon ids, one genome per row.

An epoch visits every non-overlapping window of seq_len+1 tokens once, in an
order shuffled per epoch; each rank takes every world-th window (as
DistributedSampler does) and all ranks take the same number of batches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from workloads.harness import Refused

CORPUS = Path(__file__).with_name("corpus.txt")

Batch = tuple[torch.Tensor, torch.Tensor]


class Synthetic:
    name = "synthetic"
    has_epochs = False
    max_token: int | None = None

    def __init__(self, vocab_size: int, device: torch.device, seed: int, rank: int, pool: int = 4) -> None:
        self.vocab_size = vocab_size
        self.device = device
        self.seed = seed * 1000 + rank  # ranks see different data, as in data parallelism
        self.pool = pool

    def batches(self, batch: int, seq: int, rank: int, world: int) -> Iterator[Batch]:
        gen = torch.Generator(device="cpu").manual_seed(self.seed)
        tokens = [torch.randint(0, self.vocab_size, (batch, seq + 1), generator=gen).to(self.device)
                  for _ in range(self.pool)]
        i = 0
        while True:
            t = tokens[i % self.pool]
            i += 1
            yield t[:, :-1], t[:, 1:]

    def steps_per_epoch(self, batch: int, seq: int, world: int) -> int | None:
        return None


class Windows:
    """Non-overlapping windows of seq+1 tokens over a 1-D token array, or the rows of a 2-D one."""

    has_epochs = True

    def __init__(self, name: str, tokens: np.ndarray, device: torch.device, seed: int,
                 max_token: int | None) -> None:
        self.name = name
        self.tokens = tokens
        self.device = device
        self.seed = seed
        self.max_token = max_token
        self.pin = device.type == "cuda"

    def _count(self, seq: int) -> int:
        if self.tokens.ndim == 2:
            if self.tokens.shape[1] != seq + 1:
                raise Refused(f"{self.name}: rows hold {self.tokens.shape[1] - 1} tokens, not seq_len {seq}")
            return int(self.tokens.shape[0])
        return max(0, (len(self.tokens) - 1) // seq)

    def _window(self, index: int, seq: int) -> np.ndarray:
        if self.tokens.ndim == 2:
            return self.tokens[index]
        return self.tokens[index * seq: index * seq + seq + 1]

    def steps_per_epoch(self, batch: int, seq: int, world: int) -> int:
        return self._count(seq) // world // batch

    def epoch(self, epoch: int, batch: int, seq: int, rank: int, world: int) -> Iterator[Batch]:
        steps = self.steps_per_epoch(batch, seq, world)
        if steps < 1:
            raise Refused(f"{self.name} has {self._count(seq)} windows of {seq + 1} tokens: "
                          f"too few for batch {batch} on {world} rank(s)")
        order = np.random.default_rng([self.seed, epoch]).permutation(self._count(seq))[rank::world]
        for step in range(steps):
            rows = [self._window(int(i), seq) for i in order[step * batch:(step + 1) * batch]]
            t = torch.from_numpy(np.stack(rows).astype(np.int64))
            if self.pin:
                t = t.pin_memory()
            t = t.to(self.device, non_blocking=True)
            yield t[:, :-1], t[:, 1:]

    def batches(self, batch: int, seq: int, rank: int, world: int) -> Iterator[Batch]:
        """Endless: epoch after epoch (for runs measured in steps)."""
        epoch = 0
        while True:
            yield from self.epoch(epoch, batch, seq, rank, world)
            epoch += 1


def open_source(spec: str, vocab_size: int, device: torch.device, seed: int, rank: int) -> Synthetic | Windows:
    """``synthetic`` | ``text`` | ``file:/path`` -> a source."""
    if spec == "synthetic":
        return Synthetic(vocab_size, device, seed, rank)
    if spec == "text":
        return Windows("text", np.frombuffer(CORPUS.read_bytes(), dtype=np.uint8), device, seed, 255)
    if spec.startswith("file:"):
        name = spec[len("file:"):]
        path = CORPUS if name == "@corpus" else Path(name).expanduser()
        if not path.is_file():
            raise Refused(f"data file {path} does not exist")
        if path.suffix == ".bin":
            # GPT-2 token ids (< 50257) as nanoGPT writes them; not scanned (the file may be GiBs).
            return Windows(f"file:{path}", np.memmap(path, dtype=np.uint16, mode="r"), device, seed, None)
        return Windows(f"file:{path}", np.memmap(path, dtype=np.uint8, mode="r"), device, seed, 255)
    raise Refused(f"unknown data {spec!r}: use synthetic, text, file:/path or file:@corpus")
