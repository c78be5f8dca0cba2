"""npuctl's reconciler: specs, the stage engine, state, and the command line."""

__version__ = "0.1.0"
