"""Writes ``corpus.txt``: a small English-like text made here, free of anyone's rights.

Deterministic (fixed seed), so the shipped file can be re-made byte for byte:
``python -m workloads.data.make_corpus``. It is prose-shaped (chapters,
paragraphs, sentences of common words) so byte-level language modelling on it
behaves like modelling real text, at ~0.6 MiB (the repository limit is 1 MiB).
"""

from __future__ import annotations

import random
from pathlib import Path

TARGET_BYTES = 600_000
SEED = 20240607

NOUNS = ("river", "lantern", "harbour", "orchard", "winter", "letter", "mill", "bridge", "valley", "engine",
         "garden", "clock", "road", "village", "mountain", "ship", "window", "field", "forest", "house",
         "keeper", "teacher", "miller", "sailor", "child", "stranger", "doctor", "farmer", "weaver", "king")
ADJECTIVES = ("old", "quiet", "bright", "narrow", "distant", "patient", "cold", "golden", "small", "heavy",
              "restless", "gentle", "broken", "silver", "early", "careful", "wide", "grey", "honest", "last")
VERBS = ("watched", "carried", "followed", "remembered", "crossed", "mended", "opened", "found", "built",
         "answered", "kept", "lost", "measured", "painted", "counted", "heard", "left", "planted", "named")
PREPOSITIONS = ("beyond", "under", "near", "across", "behind", "beside", "through", "above", "toward")
ADVERBS = ("slowly", "again", "at dawn", "before the rain", "without a word", "all that year", "in silence",
           "once more", "by lamplight", "until evening")
CONNECTIVES = ("and", "but", "while", "because", "so", "although")
NAMES = ("Ada", "Tomas", "Mirren", "Eli", "Juno", "Oskar", "Lena", "Bram", "Iris", "Caleb", "Noor", "Wren")


def _phrase(rng: random.Random) -> str:
    subject = rng.choice(NAMES) if rng.random() < 0.3 else f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    words = [subject, rng.choice(VERBS), f"the {rng.choice(NOUNS)}"]
    if rng.random() < 0.6:
        words.append(f"{rng.choice(PREPOSITIONS)} the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}")
    if rng.random() < 0.4:
        words.append(rng.choice(ADVERBS))
    return " ".join(words)


def sentence(rng: random.Random) -> str:
    text = _phrase(rng)
    if rng.random() < 0.35:
        text += f", {rng.choice(CONNECTIVES)} {_phrase(rng)}"
    if rng.random() < 0.12:
        speaker = rng.choice(NAMES)
        return f'"{text[0].upper()}{text[1:]}," said {speaker}.'
    return text[0].upper() + text[1:] + rng.choice((".", ".", ".", "!", "?", ";"))[0].replace(";", ".")


def make(target_bytes: int = TARGET_BYTES, seed: int = SEED) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    chapter = 0
    while size < target_bytes:
        chapter += 1
        heading = f"CHAPTER {chapter}. THE {rng.choice(ADJECTIVES).upper()} {rng.choice(NOUNS).upper()}\n\n"
        parts.append(heading)
        size += len(heading)
        for _ in range(rng.randint(6, 14)):
            paragraph = " ".join(sentence(rng) for _ in range(rng.randint(3, 9))) + "\n\n"
            parts.append(paragraph)
            size += len(paragraph)
    return "".join(parts)[:target_bytes]


def main() -> None:
    path = Path(__file__).with_name("corpus.txt")
    path.write_text(make(), encoding="ascii")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
