"""What one worker does to its gradients, and back: the `Compressor` interface and its methods
(dense, top-k, DLGS, coarse blocks; `compressors`), built by name from the run's settings; the
numba host path of the coarse step and its packet-size bounds (`fastpath`, one jitted call per
message through `gradblock.fastpath`); DGC's sparsity warm-up (`warmup`). Frames are the wire
format of `gradblock.codec`, their numbers those of `gradblock.refmodel` / `gradblock.torchstep`;
nothing here knows about processes, hooks or training loops, so every layer above can use it."""
