"""Change points in one series of figures ordered in time (one point per epoch, the median of
its repeats), found by a kept library: ruptures' binary segmentation (a segment is split where the means of
its two sides differ most, while that difference stands out of the noise), each change then kept
only when a Student t-test between the two segments it separates says it is significant.

Why ruptures and not Apache Otava (E-divisive means with a t-test, the detector this follows):
Otava 0.8 pins numpy 2.2.* and scipy < 1.17 and pulls in BigQuery, Slack and Graphite clients,
so installing it would downgrade the numpy torch runs with; MongoDB's signal-processing-algorithms
(the E-divisive Otava builds on) pins numpy < 2. ruptures needs only numpy and scipy
(docs/regressions.md).

The series is taken in logarithms (a change is relative: -5% is -5% at any speed) and scaled by a
robust estimate of its noise (the median absolute difference of neighbours), so one penalty
fits every series; single outliers are replaced by their neighbours' median first, so a slow node on one
night is not a level shift. ``benchmarks/bench_regressions.py`` measures false alarms and
detection on synthetic histories and is where the constants below were chosen.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Binary segmentation splits a segment while the split lowers the squared error of the
# noise-scaled series by more than this: (difference of the two means)^2 x n1 n2 / n, i.e. a
# change of about 3.7 standard errors. Chosen on the benchmark for at most 2% false alarms.
PENALTY = 14.0
ALPHA = 0.002  # a change is kept when the t-test's two-sided p-value is below this
MIN_SIZE = 3  # points on each side of a change: a change needs three epochs after it
CLIP = 4.0  # noise widths from the median beyond which a point is clipped (single outliers)
MIN_NOISE = 0.002  # relative: a series steadier than this is treated as this noisy


@dataclass(frozen=True)
class Change:
    """A change point: ``index`` is the first point after it."""

    index: int
    before: float  # mean of the segment before (in the series' unit: geometric mean)
    after: float  # mean of the segment after
    p_value: float
    before_start: int  # first index of the segment before
    after_end: int  # one past the last index of the segment after

    @property
    def magnitude(self) -> float:
        """Relative change, after / before - 1 (-0.05: five per cent lower)."""
        return self.after / self.before - 1.0


def noise(logs: np.ndarray) -> float:
    """Robust standard deviation of one point: MAD of the differences of neighbours / sqrt(2)
    (a level shift is one difference among many, so it barely moves it)."""
    if len(logs) < 3:
        return MIN_NOISE
    diffs = np.diff(logs)
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return max(1.4826 * mad / math.sqrt(2.0), MIN_NOISE)


def change_points(values: Sequence[float], penalty: float = PENALTY, alpha: float = ALPHA,
                  min_size: int = MIN_SIZE) -> list[Change]:
    """Change points of a series of positive figures, oldest first (non-positive ones are refused)."""
    import ruptures
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if np.any(~np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("change_points: every value must be a positive finite number")
    n = len(x)
    if n < 2 * min_size:
        return []
    logs = np.log(x)
    sigma = noise(logs)
    clipped = _clip_outliers(logs, sigma)
    scaled = (clipped / sigma).reshape(-1, 1)
    ends = ruptures.Binseg(model="l2", min_size=min_size, jump=1).fit(scaled).predict(pen=penalty)
    bounds = [0, *ends]  # ends finishes with n
    out: list[Change] = []
    for i in range(1, len(bounds) - 1):
        left, right = clipped[bounds[i - 1]:bounds[i]], clipped[bounds[i]:bounds[i + 1]]
        with warnings.catch_warnings():  # two segments of (nearly) equal points: scipy warns, the p-value stands
            warnings.simplefilter("ignore", RuntimeWarning)
            p_value = float(stats.ttest_ind(left, right, equal_var=True).pvalue)
        if not p_value < alpha:
            continue
        out.append(Change(index=bounds[i], before=math.exp(float(left.mean())), after=math.exp(float(right.mean())),
                          p_value=p_value, before_start=bounds[i - 1], after_end=bounds[i + 1]))
    return out


def _clip_outliers(logs: np.ndarray, sigma: float) -> np.ndarray:
    """A point more than CLIP noise widths from the median of itself and its two neighbours on each
    side is replaced by that median: one point far from both sides is an outlier (a slow node one
    night), a level shift is not (its neighbours after it moved too)."""
    out = logs.copy()
    n = len(logs)
    for i in range(n):
        local = float(np.median(logs[max(0, i - 2):min(n, i + 3)]))
        if abs(logs[i] - local) > CLIP * sigma:
            out[i] = local
    return out
