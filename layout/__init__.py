"""The layout: which clustering columns, weights and partitioning serve the table's workload.

The cost model (``model``) predicts the files each query reads under a candidate layout from a
sample of the table's rows; the search (``search``) ranks candidates on it; ``advise`` runs both
on the table (``lakecluster tune --queries/--from-workload``); the layout loop's policy
(``auto_layout``) decides, within its budgets, when the compactor adopts a better layout, and the
adoptions are kept beside the table (``adoptions``). Nothing here rewrites a file: the compactor
follows the layout it is given.
"""
