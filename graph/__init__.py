"""PersonaLab's turn graph: its state, wiring, model clients, CLI and in-process runner."""

from personalab.stores.blas import set_blas_threads

set_blas_threads()  # before anything loads NumPy (stores.blas says why)
