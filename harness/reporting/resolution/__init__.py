"""Which differences are real, in every report format: all pairs of systems resolved (`table`, ``report
--resolution``) and every system against one baseline (`baseline`, ``report --significance``)."""
