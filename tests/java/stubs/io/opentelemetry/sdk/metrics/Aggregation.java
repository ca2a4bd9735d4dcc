package io.opentelemetry.sdk.metrics;

import java.util.List;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface Aggregation {
    static Aggregation explicitBucketHistogram(List<Double> boundaries) {
        return new Aggregation() { };
    }
}
