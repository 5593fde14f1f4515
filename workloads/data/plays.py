"""A Shakespeare-sized play text, generated here (nothing is downloaded at run time).

Study B trained on char-rnn's ``shakespeare_input.txt`` (the complete works, 4,573,338
characters, 4.36 MiB, 67 distinct characters). That file cannot ship in this repository
(its size limit is 1 MiB) and runs cannot fetch it, so ``--data shakespeare`` makes a text
with the same two properties a character-level benchmark depends on: the same length
(4,573,338 characters, so an epoch has the study's number of steps) and the same
alphabet (the 65 characters of tiny-shakespeare plus ``[`` and ``]``, so the character
vocabulary, and with it the model, is the study's: 67 ids). The words are play-shaped
(speaker lines, verse, stage directions) from a fixed seed: deterministic, the same on
every rank and every machine. Making it takes about a quarter of a second of Python, which every
rank of every run would pay, so the first run keeps it under ``$XDG_CACHE_HOME/orch/data`` (``~/.cache``;
``ORCH_DATA_CACHE`` names another folder, ``off`` keeps nothing) and later ones read it: the
file's name carries a digest of this module, so a change here makes a new text, never a stale one.

To train on the real file instead: ``--data file:/path/to/shakespeare_input.txt
--tokenizer char`` (or tiny-shakespeare's input.txt: 1,115,394 characters, 65 ids).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import random
import tempfile
from pathlib import Path

LENGTH = 4_573_338  # characters of shakespeare_input.txt
SEED = 1623  # the First Folio
# The alphabet of shakespeare_input.txt: 67 characters.
ALPHABET = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz"

SPEAKERS = ("KING HENRY", "QUEEN MARGARET", "GLOUCESTER", "JULIET", "ROMEO", "FALSTAFF", "PROSPERO", "VIOLA",
            "OBERON", "TITANIA", "HAMLET", "OPHELIA", "LEAR", "CORDELIA", "MACBETH", "BANQUO", "IAGO", "OTHELLO",
            "PORTIA", "SHYLOCK", "JAQUES", "WARWICK", "KENT", "NERISSA", "EXETER", "DUKE VINCENTIO", "ZENOCRATE",
            "FIRST CITIZEN", "SECOND CITIZEN", "BOY", "YORICK", "QUINCE", "PUCK", "MERCUTIO", "TYBALT", "ARIEL")
WORDS = ("the", "and", "my", "thou", "thee", "thy", "lord", "good", "sir", "love", "king", "heaven", "night",
         "shall", "would", "crown", "blood", "honour", "grace", "speak", "heart", "eyes", "death", "sweet",
         "fair", "noble", "world", "time", "hath", "doth", "quoth", "zeal", "vex", "jest", "wax", "quick",
         "majesty", "jewel", "kingdom", "breath", "sovereign", "gentle", "tongue", "father", "daughter",
         "'tis", "o'er", "ne'er", "e'en", "i'", "good-morrow", "well-a-day", "come", "go", "stay", "hence",
         "what", "why", "where", "now", "then", "upon", "within", "against", "yet", "but", "so", "no", "ay",
         "of", "to", "in", "with", "a", "is", "not", "be", "by", "as", "for", "this", "that", "it", "his", "her")
DIRECTIONS = ("[Exit]", "[Exeunt]", "[Aside]", "[Dies]", "[Flourish]", "[Alarum]", "[Sings]")


def _verse(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(5, 10))
    if rng.random() < 0.2:
        words[rng.randrange(len(words))] = rng.choice(SPEAKERS).split()[-1].capitalize()
    if rng.random() < 0.002:
        words.append("&c")
    if rng.random() < 0.0005:
        words.insert(0, "3")
    if rng.random() < 0.0002:
        words.append("$")
    line = " ".join(words)
    return line[0].upper() + line[1:] + rng.choice((",", ",", ",", ".", ".", ";", ":", "!", "?", ""))


def _scene(rng: random.Random) -> str:
    speakers = rng.sample(SPEAKERS, 3)
    parts = [f"[Enter {speakers[0]} and {speakers[1]}]\n\n"]
    for _ in range(rng.randint(8, 20)):
        lines = [_verse(rng) for _ in range(rng.randint(1, 7))]
        parts.append(f"{rng.choice(speakers)}:\n" + "\n".join(lines) + "\n\n")
        if rng.random() < 0.08:
            parts.append(rng.choice(DIRECTIONS) + "\n\n")
    return "".join(parts)


def cache_dir() -> Path | None:
    """Where made texts are kept: ORCH_DATA_CACHE, else $XDG_CACHE_HOME/orch/data; None when off."""
    named = os.environ.get("ORCH_DATA_CACHE", "")
    if named == "off":
        return None
    if named:
        return Path(named).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orch" / "data"


def _cached_path(length: int, seed: int) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]  # the generator that made it
    return folder / f"plays-{length}-{seed}-{digest}.txt"


@functools.lru_cache(maxsize=2)
def make(length: int = LENGTH, seed: int = SEED) -> str:
    """The text (``generate``), read from the cache when a run has made it before."""
    path = _cached_path(length, seed)
    if path is not None:
        try:
            text = path.read_text(encoding="ascii")
            if len(text) == length:
                return text
        except (OSError, UnicodeDecodeError):
            pass  # not there (or unreadable): make it
    text = generate(length, seed)
    if path is not None:
        _keep(path, text)
    return text


def _keep(path: Path, text: str) -> None:
    """Write whole, then rename: ranks that make the text at once never read half a file."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".part")
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache costs the next run the making, nothing else
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def generate(length: int = LENGTH, seed: int = SEED) -> str:
    """The text: ``length`` characters over exactly ``ALPHABET`` (the first scene shows every one)."""
    rng = random.Random(seed)
    # Every character of the alphabet appears (as it does in the works), whatever the length.
    parts = ["THE GENERATED WORKS, IN 3 ACTS &c.\n\n[Enter BOY, with a purse of $]\n\n"]
    size = len(parts[0])
    while size < length:
        scene = _scene(rng)
        parts.append(scene)
        size += len(scene)
    return "".join(parts)[:length]
