"""Datasets: the synthetic task (:mod:`acerl.data.synthetic`), the real data sets (:mod:`acerl.data.real`) and
the prepare-data step (:mod:`acerl.data.prepare`); their rows are read and written with :mod:`acerl.pipeline.io`."""
