"""Graph algorithms shared by several strategies, which are not strategies themselves.

* :mod:`remat_cli.algorithms.decompose` – tree and path decompositions and the separator
  tree over them (what ``treewidth`` and ``pathwidth`` divide and conquer over);
* :mod:`remat_cli.algorithms.segments` – the forward part cut at articulation points, and
  compute sequences turned into schedules (what ``chen-*``, ``chain-dp`` and ``store-all``
  build on).

This layer sits below ``strategies/`` and imports only the graph and schedule modules.
"""
