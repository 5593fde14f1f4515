"""Character-level tokenizer (minGPT's CharDataset, nanoGPT's shakespeare_char).

The vocabulary is the distinct characters of the text, sorted (id = position in the
sorted alphabet), so tiny-shakespeare gives 65 ids and char-rnn's full
shakespeare_input.txt 67. Encoding a whole text is vectorised (numpy), a few tenths of
a second for the 4.4 MiB file, so a run can tokenize at start-up instead of shipping
token files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np


def _dtype(vocab: int) -> type[np.unsignedinteger]:
    return np.uint8 if vocab <= 256 else np.uint16 if vocab <= 65536 else np.uint32


@dataclass(frozen=True)
class CharTokenizer:
    alphabet: str  # the distinct characters, sorted; a character's id is its index

    @classmethod
    def fit(cls, text: str) -> "CharTokenizer":
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)

    def encode(self, text: str) -> np.ndarray:
        """Ids of ``text``; KeyError names a character outside the alphabet."""
        index = {ch: i for i, ch in enumerate(self.alphabet)}
        try:
            return np.array([index[ch] for ch in text], dtype=_dtype(self.vocab_size))
        except KeyError as exc:
            raise KeyError(f"character {exc.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.alphabet[int(i)] for i in ids)


def tokenize(data: bytes) -> tuple[CharTokenizer, np.ndarray]:
    """Fit the vocabulary on UTF-8 ``data`` and encode it, vectorised.

    ASCII (every byte < 128) takes a byte lookup table; anything else is decoded and its
    code points ranked with ``np.unique``. UnicodeDecodeError if ``data`` is not UTF-8.
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0 or int(raw.max()) < 128:
        present = np.flatnonzero(np.bincount(raw, minlength=128))
        lut = np.zeros(256, dtype=np.uint8)
        lut[present] = np.arange(present.size, dtype=np.uint8)
        return CharTokenizer(bytes(present.astype(np.uint8)).decode("ascii")), lut[raw]
    points = np.frombuffer(data.decode("utf-8").encode("utf-32-le"), dtype=np.uint32)
    unique, ids = np.unique(points, return_inverse=True)
    alphabet = "".join(map(chr, unique.tolist()))
    return CharTokenizer(alphabet), ids.astype(_dtype(unique.size))
