"""Shared pieces of every solver: the ODM problem (``formulation``), kernels, input
checks, in-model preprocessing, row blocks, what every training backend shares
(``training``), CPU clocks, pre-faulted work buffers and the compiled loops
(``_numba_kernels``; code outside ``solver/`` uses ``solver.kernel_sums``).
"""
