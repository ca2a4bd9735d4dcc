package io.opentelemetry.api.metrics;

import io.opentelemetry.api.common.Attributes;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface ObservableDoubleMeasurement {
    void record(double value, Attributes attributes);
}
