package org.rocksdb;

/**
 * Stub of the filter RocketMQ's own rocksdbjni build adds (upstream rocksdbjni has none):
 * only the RocksDB ConsumeQueue's manual compaction makes one, and that store is not used here.
 */
public class RemoveConsumeQueueCompactionFilter extends AbstractCompactionFilter<Slice> {
    public RemoveConsumeQueueCompactionFilter(long minPhyOffset) {
        super(0L);
        throw new UnsupportedOperationException("RocketMQ's rocksdbjni fork is not available");
    }
}
