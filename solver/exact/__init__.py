"""The exact kernel ODM solver: dual coordinate descent (``dcd_kernel``), its active-set
Newton steps (``newton_kernel``), kernel columns within a memory budget
(``kernel_columns``) and the support-vector budget of kernel models (``reduction``).
"""
