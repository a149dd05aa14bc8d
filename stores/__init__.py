"""All I/O of PersonaLab: SQLModel tables and queries, vectors, checkpointers."""

from personalab.stores.allocator import cap_malloc_arenas
from personalab.stores.blas import set_blas_threads
from personalab.stores.kept_dictionaries import keep_jieba_dictionaries

set_blas_threads()  # before anything loads NumPy (stores.blas says why)
cap_malloc_arenas()  # before the process's threads allocate (stores.allocator says why)
keep_jieba_dictionaries()  # jieba's dictionaries load from the data directory (stores.kept_dictionaries says why)
