"""The exact kernel ODM solver: dual coordinate descent (``dcd_kernel``), its active-set
Newton steps (``newton_kernel``), kernel columns within a memory budget
(``kernel_columns``), whole matrices kept across a search's solves (``kernel_memo``) and the
support-vector budget of kernel models (``reduction``).
"""
