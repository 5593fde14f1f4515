from __future__ import annotations

import numpy as np

from workloads.data import genomes


def test_vocabulary() -> None:
    assert genomes.VOCAB_SIZE == 70 and len(genomes.CODONS) == 64
    assert genomes.VOCAB[genomes.FIRST_CODON] == "AAA" and genomes.VOCAB[-1] == "TTT"


def test_tokenize_round_trip_and_unknown() -> None:
    dna = genomes.genome(300, seed=1, index=0)
    ids = genomes.tokenize(dna)
    assert ids[0] == genomes.BOS and ids[-1] == genomes.EOS and len(ids) == 102
    assert genomes.detokenize(ids) == dna
    assert genomes.tokenize("AAATTTNCG", add_special=False).tolist() == [6, 69, genomes.UNK]


def test_dataset_is_deterministic() -> None:
    a = genomes.dataset(3, 64, seed=7)
    assert a.shape == (3, 65) and a.max() < 70
    assert np.array_equal(a, genomes.dataset(3, 64, seed=7))
    assert not np.array_equal(a, genomes.dataset(3, 64, seed=8))
    assert genomes.genome(90, 7, 0).count("ATG") >= 1  # genes start with ATG
