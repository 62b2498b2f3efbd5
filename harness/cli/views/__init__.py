"""`report`'s views that bring options of their own, each in a module: `resolution` (``--resolution``, ``--test``,
``--correction``)."""
