"""Drivers: loops that move the roles' messages (in one process, window by window, over Dask,
over HTTPS) and persist what a run keeps; every protocol decision is the roles' (design §13)."""
