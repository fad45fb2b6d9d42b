"""merak-exec's per-step generator seeds (include/merak/Runtime/Random.h)."""

DATA, DROPOUT = 0, 1
_MASK = (1 << 64) - 1


def step_seed(seed, step, stream):
    """splitmix64((seed << 33) | ((step - 1) << 1) | stream), step 1-based."""
    x = ((seed << 33) | ((step - 1) << 1) | stream) & _MASK
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)
