"""A run as the user sees it: the command line, the run folder (folder), the console, loggers and
metric keys, sample episodes (samples, show), curves (plot), clean stops (stop), runs that train on
nothing (failures), start-up progress, and the async pipeline's bookkeeping (pipeline)."""
