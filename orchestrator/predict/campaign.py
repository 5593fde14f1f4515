"""`orch predict --tokens`: what training a layout on a token budget takes (time, device-hours, cost).

Every step of a layout trains the same global batch (batch size x devices sequences of seq_len
tokens), so a budget of T tokens is ceil(T / (global batch x seq_len)) steps at the predicted
step time; device-hours count every device of the run, idle or not, as an allocation does.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from orchestrator.errors import UserError

# Token counts are spoken in short-scale suffixes ("300B tokens", "1T"), case-insensitive.
SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_TOKENS = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)


# Far past any corpus (the largest training runs read about 1.5e13 tokens): the time to train
# stays a finite number of steps.
MAX_TOKENS = 1e30


def parse_tokens(text: str) -> float:
    """``300e9``, ``3e11``, ``300B``, ``1T``, ``1.5t`` -> a token count; a UserError otherwise."""
    found = _TOKENS.match(text)
    value = float(found.group(1)) * SUFFIXES.get(found.group(2).lower(), 1.0) if found else 0.0
    if not 1 <= value <= MAX_TOKENS:  # NaN fails both; 1e400 reads as infinity (issue 53)
        raise UserError(f"--tokens {text!r}: expected a token count such as 300e9, 3e11, 300B or 1T, "
                        f"up to {MAX_TOKENS:g}")
    return value


@dataclass(frozen=True)
class TimeToTrain:
    steps: int
    hours: float
    device_hours: float
    cost: float | None  # device-hours x the site's price, where it has one

    @property
    def days(self) -> float:
        return self.hours / 24


def time_to_train(tokens: float, step_s: float, *, global_batch: int, seq_len: int, devices: int,
                  price_per_device_hour: float | None) -> TimeToTrain:
    """Training ``tokens`` at ``step_s`` a step of ``global_batch`` sequences of ``seq_len`` tokens."""
    steps = math.ceil(tokens / (global_batch * seq_len))
    hours = steps * step_s / 3600
    device_hours = hours * devices
    cost = None if price_per_device_hour is None else device_hours * price_per_device_hour
    return TimeToTrain(steps, hours, device_hours, cost)
