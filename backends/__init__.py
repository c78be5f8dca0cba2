"""Toolchain adapters behind one small interface (backends.sdk.base), plus the target catalog.

Backends know their toolchain and the catalog, never git, the store or spec files.
"""
