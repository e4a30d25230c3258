"""What Sluice adds to Kafka inside the broker: delayed delivery (`delays`: parking produced
batches until they are due, the scheduler that fires them) and tag-filtered views
(`views`: a view's source partitions as requests see them, filtered batch by batch)."""
