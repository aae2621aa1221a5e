"""Synthesizable SystemVerilog (one module per file) and its Python tooling: dependencies, synthesis."""
