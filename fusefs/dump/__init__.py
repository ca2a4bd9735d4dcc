"""`mqfs dump`: a store's messages as JSON lines, CSV or raw bodies, read from its files
(no mount, no lock, no byte changed), selected with the ConsumeQueues and IndexFiles where a
selection lets it read less."""
