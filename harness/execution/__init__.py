"""Running the suite: the run loop, worker processes, fork servers and ranks, profiling, and the
tables a run collects from its workers."""
