"""strongsync's benchmark runner (`bench/run`): topology, sysbench runs, memory probe, report."""
