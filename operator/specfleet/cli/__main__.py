"""`python -m specfleet.cli`: the same as the `specfleet` command."""

from specfleet.cli.main import main

main()
