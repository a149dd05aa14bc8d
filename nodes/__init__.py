"""The turn graph's nodes and the pure rules of the seeds they apply."""

from personalab.stores.blas import set_blas_threads

set_blas_threads()  # before anything loads NumPy (stores.blas says why)
