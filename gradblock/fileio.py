"""Writing outputs safely: re-exports gradblock.codec.fileio, where the one atomic writer lives
(the bottom layer, so every layer may use it). Edit it there."""
from gradblock.codec.fileio import (OutputError, atomic_open, atomic_write,  # noqa: F401
                                    check_output_path, save_npy, save_npz, write_bytes,
                                    write_text, write_words)
