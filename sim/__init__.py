"""The capacity model: a SimPy simulation of the scheduler fleet that takes every
decision through `kit.core`, so it cannot drift from the kit it models."""
