"""Where a language model's tokens come from.

- ``synthetic``: uniform random token ids, made on the device once (a small pool
  reused every step, so random-number generation is not timed). No epochs.
- ``text``: the corpus shipped in ``workloads/data/corpus.txt`` (0.6 MiB), held
  in memory, byte-level tokens (ids 0..255).
- ``shakespeare``: a Shakespeare-sized play text generated at start-up
  (``workloads/data/plays.py``: 4,573,338 characters over the 67-character alphabet of
  char-rnn's shakespeare_input.txt, study B's data), held in memory.
- ``file:/path``: a large file streamed from disk through ``numpy.memmap`` (read
  as each batch needs it, never loaded whole): ``*.bin`` is nanoGPT's format
  (uint16 GPT-2 token ids, e.g. OpenWebText's train.bin), anything else bytes.
  ``file:@corpus`` streams the shipped corpus from disk the same way (the
  streaming path, runnable anywhere: rehearsals and tests).
- genomes (GenSLM): rows of codon ids, one genome per row.

Tokenizers (``--tokenizer``) for the text sources:
- ``auto``: GPT-2 ids for ``*.bin`` files, bytes for everything else (ids 0..255).
- ``byte``: bytes, whatever the file's name.
- ``char``: the text's distinct characters, sorted (``workloads/data/chars.py``); the
  vocabulary is their number (67 for shakespeare, 65 for tiny-shakespeare's input.txt).
  The text is read whole and tokenized in memory at start-up (a file too, so not
  streamed), and windows do not share their boundary token: an epoch is
  len // (seq_len + 1) windows, as minGPT's CharDataset counts ceil(len / (block + 1)).

An epoch visits every non-overlapping window of seq_len+1 tokens once, in an
order shuffled per epoch; each rank takes every world-th window (as
DistributedSampler does) and all ranks take the same number of batches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from workloads.data import chars, plays
from workloads.harness import Refused

TOKENIZERS: tuple[str, ...] = ("auto", "byte", "char")
CORPUS = Path(__file__).with_name("corpus.txt")

Batch = tuple[torch.Tensor, torch.Tensor]


class Synthetic:
    name = "synthetic"
    has_epochs = False
    max_token: int | None = None
    vocab_size: int | None = None  # the model's vocabulary decides

    def __init__(self, vocab_size: int, device: torch.device, seed: int, rank: int, pool: int = 4) -> None:
        self.vocab_size = vocab_size
        self.device = device
        self.seed = seed * 1000 + rank  # ranks see different data, as in data parallelism
        self.pool = pool

    def batches(self, batch: int, seq: int, rank: int, world: int) -> Iterator[Batch]:
        gen = torch.Generator(device="cpu").manual_seed(self.seed)
        vocab = self.vocab_size
        assert vocab is not None  # given at construction
        tokens = [torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(self.device)
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
                 max_token: int | None, vocab_size: int | None = None, disjoint: bool = False) -> None:
        self.name = name
        self.tokens = tokens
        self.device = device
        self.seed = seed
        self.max_token = max_token
        self.vocab_size = vocab_size  # the data's own vocabulary (character-level), None: the model's
        # Windows of seq+1 tokens start every seq tokens (sharing the boundary token), or every
        # seq+1 (disjoint, minGPT's CharDataset count).
        self.disjoint = disjoint
        self.pin = device.type == "cuda"

    def _count(self, seq: int) -> int:
        if self.tokens.ndim == 2:
            if self.tokens.shape[1] != seq + 1:
                raise Refused(f"{self.name}: rows hold {self.tokens.shape[1] - 1} tokens, not seq_len {seq}")
            return int(self.tokens.shape[0])
        if self.disjoint:
            return len(self.tokens) // (seq + 1)
        return max(0, (len(self.tokens) - 1) // seq)

    def _window(self, index: int, seq: int) -> np.ndarray:
        if self.tokens.ndim == 2:
            return self.tokens[index]
        start = index * (seq + 1 if self.disjoint else seq)
        return self.tokens[start: start + seq + 1]

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


def _char_windows(name: str, data: bytes, device: torch.device, seed: int) -> Windows:
    try:
        tokenizer, ids = chars.tokenize(data)
    except UnicodeDecodeError as exc:
        raise Refused(f"{name}: --tokenizer char needs UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if tokenizer.vocab_size < 2:
        raise Refused(f"{name}: {tokenizer.vocab_size} distinct character(s), too few to model")
    return Windows(name, ids, device, seed, tokenizer.vocab_size - 1, vocab_size=tokenizer.vocab_size,
                   disjoint=True)


def open_source(spec: str, vocab_size: int, device: torch.device, seed: int, rank: int,
                tokenizer: str = "auto") -> Synthetic | Windows:
    """``synthetic`` | ``text`` | ``shakespeare`` | ``file:/path`` -> a source (see the module doc)."""
    if tokenizer not in TOKENIZERS:
        raise Refused(f"unknown tokenizer {tokenizer!r}: use {', '.join(TOKENIZERS)}")
    if spec == "synthetic":
        if tokenizer == "char":
            raise Refused("--tokenizer char needs a text (--data text, shakespeare or file:/path), not synthetic")
        return Synthetic(vocab_size, device, seed, rank)
    if spec == "shakespeare":
        text = plays.make().encode("ascii")
        if tokenizer == "char":
            return _char_windows("shakespeare", text, device, seed)
        return Windows("shakespeare", np.frombuffer(text, dtype=np.uint8), device, seed, 255)
    if spec == "text":
        if tokenizer == "char":
            return _char_windows("text", CORPUS.read_bytes(), device, seed)
        return Windows("text", np.frombuffer(CORPUS.read_bytes(), dtype=np.uint8), device, seed, 255)
    if spec.startswith("file:"):
        name = spec[len("file:"):]
        path = CORPUS if name == "@corpus" else Path(name).expanduser()
        if not path.is_file():
            raise Refused(f"data file {path} does not exist")
        if tokenizer == "char":
            if path.suffix == ".bin":
                raise Refused(f"data file {path}: *.bin holds token ids, not text; --tokenizer char needs text")
            return _char_windows(f"file:{path}", path.read_bytes(), device, seed)
        if path.suffix == ".bin" and tokenizer == "auto":
            # GPT-2 token ids (< 50257) as nanoGPT writes them; not scanned (the file may be GiBs).
            return Windows(f"file:{path}", np.memmap(path, dtype=np.uint16, mode="r"), device, seed, None)
        return Windows(f"file:{path}", np.memmap(path, dtype=np.uint8, mode="r"), device, seed, 255)
    raise Refused(f"unknown data {spec!r}: use synthetic, text, shakespeare, file:/path or file:@corpus")
