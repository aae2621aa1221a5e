"""The CPU fast path: the compress step, momentum correction and global selection's worker
pass in numba, bit-exact with the numpy reference in refmodel/ (docs/spec.md) and checked
against it by the tests. It imports the reference's parameter checks and plans (so both raise
the same errors in the same order) and the codec's numba encoder; nothing below it imports it.
`vector_width` (512-bit vectors on AVX-512 hosts, docs/performance.md) imports no numba."""
