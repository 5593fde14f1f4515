"""Synthetic genomes and their codon tokenisation, for the GenSLM workload. numpy, no downloads.

Vocabulary (70): 6 special tokens, then the 64 codons in ACGT order
(AAA=6, AAC=7, ..., TTT=69), as GenSLM tokenises DNA 3 bases per token.

A genome is genes (ATG, codons drawn from a skewed codon usage, a stop codon)
separated by short random intergenic stretches, generated from a seed: the
same (seed, index) gives the same sequence on every machine.
"""

from __future__ import annotations

import numpy as np

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[BOS]", "[EOS]", "[UNK]", "[MASK]", "[SEP]")
BASES = "ACGT"
CODONS: tuple[str, ...] = tuple(a + b + c for a in BASES for b in BASES for c in BASES)
VOCAB: tuple[str, ...] = SPECIAL_TOKENS + CODONS
VOCAB_SIZE = len(VOCAB)  # 70
PAD, BOS, EOS, UNK = 0, 1, 2, 3
FIRST_CODON = len(SPECIAL_TOKENS)
STOP_CODONS = ("TAA", "TAG", "TGA")

_BASE_CODE = np.full(256, 255, dtype=np.uint8)
for _i, _b in enumerate(BASES):
    _BASE_CODE[ord(_b)] = _i
    _BASE_CODE[ord(_b.lower())] = _i


def codon_usage(seed: int) -> np.ndarray:
    """A skewed probability over the 61 sense codons (real genomes prefer some codons)."""
    rng = np.random.default_rng(seed)
    weights = rng.gamma(0.6, size=64)
    for stop in STOP_CODONS:
        weights[CODONS.index(stop)] = 0.0
    return weights / weights.sum()


def genome(n_bases: int, seed: int, index: int) -> str:
    """``n_bases`` of synthetic DNA, sequence ``index`` of the set made with ``seed``."""
    rng = np.random.default_rng([seed, index])
    usage = codon_usage(seed)
    codon_bytes = np.frombuffer("".join(CODONS).encode(), dtype=np.uint8).reshape(64, 3)
    out = bytearray()
    while len(out) < n_bases:
        out += rng.choice(np.frombuffer(b"ACGT", dtype=np.uint8), size=int(rng.integers(0, 40))).tobytes()
        body = rng.choice(64, size=int(rng.integers(80, 500)), p=usage)
        out += b"ATG" + codon_bytes[body].tobytes() + STOP_CODONS[int(rng.integers(3))].encode()
    return out[:n_bases].decode("ascii")


def tokenize(dna: str, *, add_special: bool = True) -> np.ndarray:
    """Codon ids of ``dna`` read in frame 0 (a trailing partial codon is dropped; non-ACGT -> [UNK])."""
    raw = np.frombuffer(dna.encode("ascii"), dtype=np.uint8)
    codes = _BASE_CODE[raw[: len(raw) // 3 * 3]].reshape(-1, 3).astype(np.int64)
    ids = FIRST_CODON + codes[:, 0] * 16 + codes[:, 1] * 4 + codes[:, 2]
    ids[(codes == 255).any(axis=1)] = UNK
    if add_special:
        ids = np.concatenate(([BOS], ids, [EOS]))
    return ids


def detokenize(ids: np.ndarray) -> str:
    return "".join(VOCAB[i] if i >= FIRST_CODON else "" for i in np.asarray(ids).tolist())


def dataset(num_sequences: int, seq_len: int, seed: int = 0) -> np.ndarray:
    """(num_sequences, seq_len + 1) token ids: [BOS] codons... [EOS], one genome per row.

    One extra token per row so inputs and next-token targets both have seq_len.
    """
    n_bases = 3 * (seq_len + 1 - 2)
    return np.stack([tokenize(genome(n_bases, seed, i)) for i in range(num_sequences)]).astype(np.int64)
