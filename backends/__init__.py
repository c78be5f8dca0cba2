"""Toolchain adapters behind one small interface (backends.base), plus the target catalog.

Backends know their toolchain and the catalog, never git, the store or spec files.
"""
