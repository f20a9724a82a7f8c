"""SODM Algorithm 1 (Wang et al., IJCAI-23) for kernel ODM: the hierarchical driver
(``hierarchy``), its level loop shared with Spark (``levels``), reproducible
stratified partitions (``partition``), landmarks and strata (``landmarks``) and the
process pool that solves partitions (``parallel``).
"""
