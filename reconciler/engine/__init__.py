"""The engine: a chain of stages per spec and shape variant, keyed by content; plan, apply, verify.

It knows stages and keys, never a vendor: every toolchain enters through backends.registry.
"""
