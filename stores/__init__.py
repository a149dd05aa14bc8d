"""All I/O of PersonaLab: SQLModel tables and queries, vectors, checkpointers."""

from personalab.stores.allocator import cap_malloc_arenas
from personalab.stores.blas import set_blas_threads

set_blas_threads()  # before anything loads NumPy (stores.blas says why)
cap_malloc_arenas()  # before the process's threads allocate (stores.allocator says why)
