"""Baselines of the SODM paper's benchmark, all on the same exact local ODM solver.

* :func:`ca_odm` (``cascade.py``): Cascade SVM (Graf et al. 2004) for ODM.
* :func:`dip_odm` (``dip.py``): DiP-SVM (Singh et al. 2017), k-means-preserving partitions.
* :func:`dc_odm` (``dc.py``): DC-SVM (Hsieh et al. 2014), kernel k-means partitions plus a
  final warm-started global solve.
* :func:`odm_svrg` (``svrg.py``): single-machine SVRG (Johnson & Zhang 2013) on the primal.

Kernel baselines return :class:`solver.sodm.hierarchy.SODMResult` (``alpha`` ``(M, 2)`` in the input
row order); ``odm_svrg`` returns :class:`solver.linear.dsvrg.LinearResult`.
"""

from solver.baselines.cascade import ca_odm
from solver.baselines.dc import dc_odm
from solver.baselines.dip import dip_odm
from solver.baselines.svrg import odm_svrg

__all__ = ["ca_odm", "dip_odm", "dc_odm", "odm_svrg"]

