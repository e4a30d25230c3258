"""The coordinators a broker hosts and what they need from it: loading and unloading the
group, transaction and share coordinators with the leadership of their internal topics'
partitions (`coordinator_hosting`), the log they write through (`coordinator_log`: acks=all
appends to a partition led here), the broker's side of transactions (`transactions`:
markers, KIP-890 verification) and producer id blocks (`producer_ids`). The coordinators'
own logic lives in the top-level `group`, `txn` and `coordinator` packages."""
