# written by `python -m gradblock.sim.cores`: Icarus's default time scale for the cores' cocotb runs
+timescale+1ns/1ps
