"""Linear ODM: exact dual coordinate descent (``dcd_linear``), the primal finite Newton
method (``newton_linear``) and SODM Algorithm 2, distributed SVRG (``dsvrg``).
"""
