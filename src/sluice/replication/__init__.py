"""Replication's decisions as sans-IO state machines: what a partition's leader, its
followers and the ISR changes decide, driven only by inputs (requests, answers, the
current time as a number, metadata states) and answering with commands (set the high
watermark, wake waiters, truncate, propose an ISR). Nothing here reads a clock, touches
a file or a socket, or draws a random number: the broker (`sluice.broker.replication`)
runs these machines on its event loop and carries out their commands, and a simulator can
run them on simulated time, network and disk, deterministically from a seed."""
