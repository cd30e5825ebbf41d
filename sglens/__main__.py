"""``python -m sglens ...`` is the ``sglens`` command."""

from .cli import program

program()
