"""The pure scheduling core: decisions only. No I/O, no clock reads, no global
randomness; time and random sources are arguments. The kit and the SimPy model
both import it, so the model cannot drift from the code it models."""
