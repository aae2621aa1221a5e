"""The cocotb testbenches, one per entry of the DUT table (sim/duts.py names each one's module),
and tb_util, their one helper library. The runner (sim/harness.py) and the tools that read the
table (sim/verify.py, sim/mutation.py, tests/test_rtl_*.py) stay one level up."""
