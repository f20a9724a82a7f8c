"""SODM on Apache Spark (pyspark is imported only inside this package).

``fit_spark(spark, dataset_dir, params, seed=...)`` trains an ``SODMClassifier`` over a stored
dataset with the DataFrame API only, so one code path serves ``local[*]``, standalone
``spark://`` masters and Spark Connect ``sc://`` servers. The result is an ordinary fitted
estimator (``solver.estimators.build_fitted``) that ``solver.io.model_io`` saves.
"""

from solver.spark.fit import fit_spark

__all__ = ["fit_spark"]
