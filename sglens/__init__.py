"""Subgraph Lens's composition root: the ``sglens`` command joining ``partition``, ``engine`` and ``app``.

Nothing else imports this package; it is the only place that knows all three.
"""
