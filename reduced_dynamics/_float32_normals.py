"""Constants of the float32 Box–Muller transform shared by the trainer's prompt stream
(``reduced_dynamics.model._batches``, stream version 2) and the single-precision Monte Carlo stream
(``reduced_dynamics.estimation._fast.normals32``, stream versions 3 and 4).

Each 32-bit word ``w`` of ``random_raw`` becomes ``f = 1 + (w >> 9) 2⁻²³`` in ``[1, 2)`` by keeping its top
23 bits as the mantissa of a float32 1.0; the radius uses ``u = 2 − f`` in ``[2⁻²³, 1]``
(``sqrt(−2 log u)``) and the angle ``2π f`` (one period more than ``2π (f − 1)``); :func:`unit_floats`.
The single-precision Monte Carlo uniforms (``_fast.uniforms32``) use the same ``f``.
"""

import math

import numpy as np

U32 = np.dtype("<u4")
SHIFT9 = np.uint32(9)
ONE_BITS = np.uint32(0x3F800000)  # float32 1.0
TWO = np.float32(2.0)
MINUS_TWO = np.float32(-2.0)
TWO_PI = np.float32(2.0 * math.pi)


def unit_floats(rng, n_words: int) -> np.ndarray:
    """``2 n_words`` float32 values ``f = 1 + (w >> 9) 2⁻²³`` in ``[1, 2)`` from ``n_words`` words of
    ``rng.bit_generator.random_raw`` (each 64-bit word's two little-endian 32-bit halves, in place)."""
    w = rng.bit_generator.random_raw(n_words).view(U32)
    np.right_shift(w, SHIFT9, out=w)
    np.bitwise_or(w, ONE_BITS, out=w)
    return w.view(np.float32)
