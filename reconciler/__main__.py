"""`python -m reconciler` is `npuctl`."""

from reconciler.cli import main

main()
