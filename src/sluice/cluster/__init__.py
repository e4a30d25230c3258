"""Cluster metadata: the model (topics, partitions, leader, leader epoch, ISR), the
metadata-store interface with its backends (embedded file today, ZooKeeper later), and
the controller logic that decides assignments.

Every change is a conditional write against a version, so a stale writer cannot
overwrite a newer state.
"""
