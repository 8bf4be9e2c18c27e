"""``python -m tapgate`` runs the command line."""

from tapgate.cli import main

main()
