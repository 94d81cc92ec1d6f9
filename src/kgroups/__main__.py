"""`python -m kgroups` is the `kgroups` command."""

from kgroups.cli import main

main()
