"""Prints 2/pi in 24-bit chunks (2/pi = sum of chunk[i] * 2^(-24 (i + 1))), computed with
exact integer arithmetic from Machin's formula, for the Payne-Hanek argument reduction of
brotensor-kernels/src/algebra/soft64.rs (`TWO_BY_PI_CHUNKS`). The first chunks are the
well-known 0xA2F983, 0x6E4E44, 0x1529FC, ...

Usage: python3 scripts/two_by_pi.py [COUNT]   (default 48)
"""
import sys

COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 48
BITS = 24 * COUNT + 64  # guard bits beyond the last chunk
ONE = 1 << BITS


def atan_inv(n):
    """atan(1/n) * ONE, rounded down term by term (the error stays in the guard bits)."""
    total, term, k, sign = 0, ONE // n, 1, 1
    while term:
        total += sign * (term // k)
        term //= n * n
        k += 2
        sign = -sign
    return total


pi = 16 * atan_inv(5) - 4 * atan_inv(239)
scaled = (2 * ONE << (24 * COUNT)) // pi  # floor(2/pi * 2^(24 COUNT))
chunks = [(scaled >> (24 * (COUNT - 1 - i))) & 0xFFFFFF for i in range(COUNT)]
assert chunks[:3] == [0xA2F983, 0x6E4E44, 0x1529FC], "2/pi starts 0xA2F983 6E4E44 1529FC"
for i in range(0, COUNT, 6):
    print("    " + " ".join(f"{c}.0," for c in chunks[i : i + 6]))
