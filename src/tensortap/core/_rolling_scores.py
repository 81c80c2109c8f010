"""One indicator's rolling level and trend scores for the spike forecast, kept up to date a
value at a time (pure Python: ``bisect`` on sorted lists).

An indicator's window is its last ``recent + gap + baseline`` values (the forecast's logs),
oldest first: the baseline at its start, the recent values at its end. Of each window,
:meth:`RollingScores.scores` gives

- ``center``: the median of the baseline; ``spread``: the median absolute deviation from it,
  scaled to a standard deviation (at least ``min_spread``);
- ``level``: how many spreads the median of the recent values lies above the center;
- ``trend``: the Mann-Kendall statistic of the recent values, as a z-score (no ties correction).

These are the numbers a fresh partition of the whole window gives, bit for bit: the same
order statistics, the same arithmetic on them. Only the bookkeeping differs: the baseline and
the recent values are kept sorted (one deletion and one insertion each as the window slides);
the median absolute deviation is the median of two sorted runs of deviations (below and above
the center), found by moving the previous window's split between them a step or two; and the
Mann-Kendall sum changes by what the leaving and the arriving value contribute (counted by
bisection). That is a few dozen Python operations an indicator and touches a few hundred
bytes; partitioning the windows with NumPy read and wrote some 60 KB a step for ten
indicators, which a training step has pushed out of the caches by the time it is read: four
times what it costs alone.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort

#: MAD to standard deviation of a normal distribution.
MAD_TO_SD = 1.4826


class RollingScores:
    """The scores of one indicator's window (see the module docstring): :meth:`push` each
    value; once :attr:`count` reaches :attr:`size`, :meth:`scores` is that window's."""

    __slots__ = (
        "_base",
        "_last",
        "_ring",
        "_root",
        "_split",
        "_sum",
        "baseline",
        "count",
        "min_spread",
        "recent",
        "size",
    )

    def __init__(self, recent: int, gap: int, baseline: int, min_spread: float) -> None:
        self.recent, self.baseline, self.min_spread = recent, baseline, min_spread
        self.size = recent + gap + baseline
        self.count = 0  # values pushed
        self._ring = [0.0] * self.size  # the value pushed as the n-th at n % size
        # once scored: the baseline and the recent values sorted, the Mann-Kendall sum of the
        # recent values, and how many of the deviations below the center are among the
        # baseline's smaller half of deviations (where the next search for it starts)
        self._base: list[float] | None = None
        self._last: list[float] = []
        self._sum = 0
        self._split = 0
        self._root = math.sqrt(recent * (recent - 1) * (2 * recent + 5) / 18.0)

    def push(self, value: float) -> None:
        """The window slides by one: ``value`` arrives, the oldest value leaves."""
        ring, size = self._ring, self.size
        count = self.count
        at = count % size
        leaving = ring[at]
        ring[at] = value
        self.count = count = count + 1
        base = self._base
        if base is None:  # not scored yet: sorted when first scored
            return
        del base[bisect_left(base, leaving)]
        insort(base, ring[(count - size + self.baseline - 1) % size])  # from the gap
        last = self._last
        out = ring[(count - 1 - self.recent) % size]  # into the gap
        below = bisect_left(last, out)
        above = len(last) - bisect_right(last, out)
        del last[below]
        # the pairs the leaving value was the earlier of go, the arriving value's come
        under = bisect_left(last, value)
        at = bisect_right(last, value)
        self._sum += below - above + under - (len(last) - at)
        last.insert(at, value)

    def scores(self) -> tuple[float, float, float]:
        """``(center, level, trend)`` of the window (its last :attr:`size` values)."""
        base = self._base
        if base is None:
            if self.count < self.size:
                raise ValueError(f"a window of {self.size} values has {self.count}")
            base = self._sort()
        n = len(base)
        half = n // 2
        center = base[half] if n % 2 else 0.5 * (base[half - 1] + base[half])
        # the median absolute deviation: of the sorted deviations below the center,
        # a[i] = center - base[below - 1 - i], and above it, b[i] = base[below + i] - center
        # (each the bits of abs(x - center)), the median of the two runs merged: the k-th
        # smallest (and the next, if n is even), from the split that takes j from below and
        # k - j from above, moved from the last window's a step or two
        below = k = n - half
        j = min(max(self._split, k - half, 0), k)
        while True:
            if j > 0 and k - j < half and center - base[below - j] > base[below + k - j] - center:
                j -= 1
            elif (
                k - j > 0
                and j < below
                and base[below + k - j - 1] - center > center - base[below - 1 - j]
            ):
                j += 1
            else:
                break
        self._split = j
        if j == 0:
            kth = base[below + k - 1] - center
        elif j == k:
            kth = center - base[below - j]
        else:
            kth = max(center - base[below - j], base[below + k - j - 1] - center)
        if n % 2 == 0:  # and the next smallest: whichever run's next is smaller
            if j == below:
                kth = 0.5 * (kth + (base[below + k - j] - center))
            elif k - j == half:
                kth = 0.5 * (kth + (center - base[below - 1 - j]))
            else:
                kth = 0.5 * (kth + min(center - base[below - 1 - j], base[below + k - j] - center))
        spread = MAD_TO_SD * kth
        if spread < self.min_spread:
            spread = self.min_spread
        last = self._last
        m = len(last)
        half = m // 2
        middle = last[half] if m % 2 else 0.5 * (last[half - 1] + last[half])
        level = (middle - center) / spread
        if m < 3:
            return center, level, 0.0
        s = float(self._sum)
        return center, level, (s - ((s > 0) - (s < 0))) / self._root

    def _sort(self) -> list[float]:
        count, size, ring = self.count, self.size, self._ring
        window = [ring[(count - size + i) % size] for i in range(size)]
        base = self._base = sorted(window[: self.baseline])
        last = window[size - self.recent :]
        self._last = sorted(last)
        self._sum = sum((y > x) - (y < x) for i, x in enumerate(last) for y in last[i + 1 :])
        self._split = (len(base) - len(base) // 2) // 2
        return base
