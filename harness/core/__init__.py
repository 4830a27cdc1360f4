"""What every part of the harness stands on: the run folder's layout and atomic writes, the
configuration, the machine's facts, nsys's command lines, Ctrl-C handling and the console's progress."""
