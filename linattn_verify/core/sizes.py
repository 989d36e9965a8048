# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Strategies for the integer and scalar parts of a case: T, head dims, B, H, scales, packings.

Every family draws its sizes here; `FIXED_SCALES` names the scales a kernel may be limited to.

Also the argument checks every strategy shares, so that their messages read alike.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from linattn_verify.errors import InvalidArgument

DEFAULT_MODULI = (16, 32, 64)
"""Moduli whose every residue `seq_lens` reaches: the usual chunk and block sizes."""

PRIME_LIMIT = 4096
"""`seq_lens` samples primes up to this bound (plain draws still reach longer T)."""

NICE_SCALES = (1.0, 0.5, 2.0, 0.25, 0.125)
"""Powers of two: scales that multiply exactly, so a scale bug cannot hide in rounding."""

AWKWARD_SCALES = (0.3, 1 / 3, 0.1, 0.7071067811865476, 1.7, 1.1)
"""Scales with long binary expansions (0.1, 1/3, 1/√2): every multiplication rounds."""

NON_POWER_OF_TWO_DIMS = (3, 5, 7, 12, 24, 48, 96, 100, 129, 192, 255)
"""Head dims that real kernels got wrong: non-powers of two, 100 (fla #836), just past 128."""


def check_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an int (not a bool), else raise `InvalidArgument` naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(
            f"Expected int but got {name}={value!r} (type={type(value).__name__})."
        )
    return value


def check_int_range(name: str, min_value: Any, max_value: Any, *, lowest: int) -> None:
    """Check that ``lowest <= min_value <= max_value`` for the ints ``min_<name>``/``max_<name>``.

    Args:
        name: The argument pair's stem, quoted in the message (``"value"``, ``"seq_len"``).
        min_value: The lower end given.
        max_value: The upper end given.
        lowest: The smallest value the lower end may take.

    Raises:
        InvalidArgument: quoting both ends when they are not ints or out of order.
    """
    check_int(f"min_{name}", min_value)
    check_int(f"max_{name}", max_value)
    if min_value < lowest or max_value < min_value:
        raise InvalidArgument(
            f"Got min_{name}={min_value!r}, max_{name}={max_value!r}, but they must satisfy "
            f"{lowest} <= min_{name} <= max_{name}."
        )


def check_choices(
    name: str, values: Any, allowed: Sequence[Any], *, empty: bool = False
) -> tuple[Any, ...]:
    """Return ``values`` as a tuple if it is a sequence drawn from ``allowed``.

    ``values`` must be non-empty unless ``empty``.

    Raises:
        InvalidArgument: quoting ``values`` when it is a string, empty, or holds unknown items.
    """
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidArgument(
            f"Expected {name} to be a sequence such as {tuple(allowed)!r} but got {values!r}."
        )
    unknown = [v for v in values if v not in allowed]
    if (not values and not empty) or unknown:
        raise InvalidArgument(
            f"Got {name}={tuple(values)!r}, but {name} must be a non-empty selection from "
            f"{tuple(allowed)!r}."
        )
    return tuple(values)


@functools.lru_cache(maxsize=4)
def _primes_up_to(n: int) -> tuple[int, ...]:
    """Return the primes <= n (sieve of Eratosthenes)."""
    if n < 2:
        return ()
    sieve = bytearray([1]) * (n + 1)
    sieve[0] = sieve[1] = 0
    for p in range(2, math.isqrt(n) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytearray(len(range(p * p, n + 1, p)))
    return tuple(i for i, is_prime in enumerate(sieve) if is_prime)


@st.composite
def _residues(draw: st.DrawFn, lo: int, hi: int, moduli: tuple[int, ...]) -> int:
    """Draw T = C·n + r in [lo, hi] for a modulus C and residue r drawn independently."""
    C = draw(st.sampled_from(moduli), label="modulus")
    r = draw(st.integers(0, C - 1), label="residue")
    n_lo, n_hi = max(0, -((r - lo) // C)), (hi - r) // C
    if n_lo > n_hi:
        # The range is too narrow for this residue; any value in range keeps the draw valid.
        return lo + r % (hi - lo + 1)
    return C * draw(st.integers(n_lo, n_hi), label="chunks") + r


def seq_lens(
    *, min_value: int = 1, max_value: int = 256, chunk_sizes: Sequence[int] = DEFAULT_MODULI
) -> st.SearchStrategy[int]:
    """Generate sequence lengths T in ``[min_value, max_value]``, biased toward the bug classes.

    Beside plain draws, T is drawn as the minimum (T = 1 by default: the tail-only case), tiny
    values, primes (never a multiple of any block), and ``C·n + r`` for C in 16, 32, 64 and every
    chunk size, with the residue r drawn uniformly: every residue mod those moduli that fits in
    the range is reachable. Shrinks toward ``min_value``. Nothing in the range is excluded.

    Args:
        min_value: Shortest T, >= 1. Default: `1`.
        max_value: Longest T. Default: `256`.
        chunk_sizes: Chunk (block) sizes of the kernel under test, >= 1, added to the moduli.
            Default: `(16, 32, 64)`.

    Raises:
        InvalidArgument: if the bounds are not ints with 1 <= min_value <= max_value, or a chunk
            size is not a positive int.
    """
    check_int_range("value", min_value, max_value, lowest=1)
    if isinstance(chunk_sizes, str) or not isinstance(chunk_sizes, Sequence):
        raise InvalidArgument(
            f"Expected chunk_sizes to be a sequence of ints but got {chunk_sizes!r}."
        )
    for c in chunk_sizes:
        if check_int("chunk_sizes[i]", c) < 1:
            raise InvalidArgument(f"Got chunk_sizes={tuple(chunk_sizes)!r}, but each must be >= 1.")
    moduli = tuple(sorted({*DEFAULT_MODULI, *chunk_sizes}))
    branches: list[st.SearchStrategy[int]] = [
        st.just(min_value),
        st.integers(min_value, min(max_value, min_value + 7)),
    ]
    primes = [p for p in _primes_up_to(min(max_value, PRIME_LIMIT)) if p >= min_value]
    if primes:
        branches.append(st.sampled_from(primes))
    branches += [_residues(min_value, max_value, moduli), st.integers(min_value, max_value)]
    return st.one_of(branches)


def head_dims(*, min_value: int = 1, max_value: int = 256) -> st.SearchStrategy[int]:
    """Generate head dims (K or V) in ``[min_value, max_value]``.

    Biased toward non-powers of two (3, 5, 7, 12, 100, 129, 255, ...) and powers of two, with
    plain draws between; shrinks toward ``min_value``. Nothing in the range is excluded. Draw K
    and V separately: K != V is then the common case.

    Args:
        min_value: Smallest dim, >= 1. Default: `1`.
        max_value: Largest dim. Default: `256`.

    Raises:
        InvalidArgument: if the bounds are not ints with 1 <= min_value <= max_value.
    """
    check_int_range("value", min_value, max_value, lowest=1)
    powers = [2**i for i in range(9)]
    special = [d for d in (*NON_POWER_OF_TWO_DIMS, *powers) if min_value <= d <= max_value]
    branches: list[st.SearchStrategy[int]] = [st.just(min_value)]
    if special:
        branches.append(st.sampled_from(sorted(special)))
    branches.append(st.integers(min_value, max_value))
    return st.one_of(branches)


def batch_sizes(*, min_value: int = 1, max_value: int = 3) -> st.SearchStrategy[int]:
    """Generate batch sizes B in ``[min_value, max_value]`` (B > 1 exposes batch-stride bugs).

    Raises:
        InvalidArgument: if the bounds are not ints with 1 <= min_value <= max_value.
    """
    check_int_range("value", min_value, max_value, lowest=1)
    return st.integers(min_value, max_value)


def head_counts(*, min_value: int = 1, max_value: int = 4) -> st.SearchStrategy[int]:
    """Generate head counts H in ``[min_value, max_value]`` (H > 1 exposes head-stride bugs).

    Raises:
        InvalidArgument: if the bounds are not ints with 1 <= min_value <= max_value.
    """
    check_int_range("value", min_value, max_value, lowest=1)
    return st.integers(min_value, max_value)


def scales(
    *, min_value: float = 2.0**-4, max_value: float = 2.0, allow_none: bool = True
) -> st.SearchStrategy[float | None]:
    """Generate scales s: `None` (the default K^-1/2), powers of two, awkward values, any float.

    Powers of two (1, 0.5, 2, ...) multiply exactly; awkward values (0.1, 1/3, 1/√2, ...) round
    on every product; plain draws cover the rest of ``[min_value, max_value]``. Excluded: scales
    <= 0 (legal, but a negative scale flips the normalizer's sign) and values outside the range.

    Args:
        min_value: Smallest scale, > 0. Default: `0.0625`.
        max_value: Largest scale. Default: `2.0`.
        allow_none: Also generate `None`. Default: `True`.

    Raises:
        InvalidArgument: if the bounds are not finite reals with 0 < min_value <= max_value.
    """
    for name, value in (("min_value", min_value), ("max_value", max_value)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidArgument(
                f"Expected a real number but got {name}={value!r} (type={type(value).__name__})."
            )
        if not math.isfinite(value):
            raise InvalidArgument(f"Got {name}={value!r}, but it must be finite.")
    if not 0 < min_value <= max_value:
        raise InvalidArgument(
            f"Got min_value={min_value!r}, max_value={max_value!r}, but they must satisfy "
            "0 < min_value <= max_value."
        )
    if not isinstance(allow_none, bool):
        raise InvalidArgument(f"Expected a bool but got allow_none={allow_none!r}.")
    fixed = [s for s in (*NICE_SCALES, *AWKWARD_SCALES) if min_value <= s <= max_value]
    branches: list[st.SearchStrategy[float | None]] = [st.none()] if allow_none else []
    if fixed:
        branches.append(st.sampled_from(fixed))
    branches.append(st.floats(float(min_value), float(max_value)))
    return st.one_of(branches)


FIXED_SCALES = {"default": -0.5, "one": 0.0}
"""The scales a kernel may be limited to (`Capabilities.scales`): K to these powers."""


def fixed_scales(names: tuple[str, ...], K: int) -> tuple[float, ...]:
    """The values of the named scales for key dimension K (`FIXED_SCALES`)."""
    return tuple(K ** FIXED_SCALES[name] for name in names)


def dyadic_scale_exponent(names: tuple[str, ...], K: int) -> int | str | None:
    """The exponent e of the scale 2^e an exactness property must use, or why none exists.

    `None` when any scale may be passed (``names`` empty: the property picks its own power of
    two); else the exponent of the first named scale that is a power of two at this K (K^-1/2
    is one for K = 1, 4, 16, 64, 256), or the reason there is none.
    """
    if not names:
        return None
    for value in fixed_scales(names, K):
        mantissa, exponent = math.frexp(value)
        if mantissa == 0.5:
            return exponent - 1
    shown = ", ".join(f"{v:.4g}" for v in fixed_scales(names, K))
    return f"its fixed scale ({shown} at K={K}) is not a power of two: no input is dyadic"


def declared_scales(fixed: Sequence[str], K: int) -> st.SearchStrategy[float | None]:
    """Generate any scale (`scales`), or only the named ones (a kernel's declared scales).

    ``"default"`` is `None` or K^-1/2, ``"one"`` is 1 (`FIXED_SCALES`).
    """
    if not fixed:
        return scales()
    values: list[float | None] = []
    for name in fixed:
        values += [None, K**-0.5] if name == "default" else [float(K ** FIXED_SCALES[name])]
    return st.sampled_from(values)


@st.composite
def _packings(draw: st.DrawFn, total: int, min_size: int, max_size: int) -> tuple[int, ...]:
    n = draw(st.integers(min_size, max_size), label="num_segments")
    lengths, remaining = [], total
    for _ in range(n - 1):
        # Empty and length-1 segments first, so shrinking heads for them.
        wanted = draw(
            st.one_of(st.just(0), st.just(1), st.integers(0, 4), st.integers(0, total)),
            label="segment",
        )
        lengths.append(min(wanted, remaining))
        remaining -= lengths[-1]
    lengths.append(remaining)
    return tuple(draw(st.permutations(lengths), label="order"))


def seq_packings(
    total: int, *, min_size: int = 1, max_size: int = 4
) -> st.SearchStrategy[tuple[int, ...]]:
    """Generate varlen packings: tuples of ``min_size..max_size`` segment lengths summing to total.

    Segments are biased toward empty, length-1 and short ones, in any order (the long remainder
    lands anywhere). Nothing is excluded: every composition of ``total`` into that many parts
    can be drawn.

    Args:
        total: The packed length T, >= 0.
        min_size: Fewest segments (N), >= 1. Default: `1`.
        max_size: Most segments. Default: `4`.

    Raises:
        InvalidArgument: if ``total`` is not an int >= 0, or the sizes are not ints with
            1 <= min_size <= max_size.
    """
    if check_int("total", total) < 0:
        raise InvalidArgument(f"Got total={total!r}, but total must be >= 0.")
    check_int_range("size", min_size, max_size, lowest=1)
    return _packings(total, min_size, max_size)


__all__ = [
    "FIXED_SCALES",
    "batch_sizes",
    "check_choices",
    "check_int",
    "check_int_range",
    "declared_scales",
    "dyadic_scale_exponent",
    "fixed_scales",
    "head_counts",
    "head_dims",
    "scales",
    "seq_lens",
    "seq_packings",
]
